"""launcher=kubernetes: the run's plan as Kubernetes objects, built with the field's own models
(kubeflow-trainer-api: TrainJob, JobSet and the core/v1 kinds) and checked before anything is applied.

    training alone, or vLLM colocated    a TrainJob on Kubeflow Trainer's `torch-distributed` runtime: numNodes,
                                         numProcPerNode and resourcesPerNode are the plan's nodes, processes and
                                         GPUs; the runtime hands torchrun the rest as PET_* variables
    a vLLM server with pods of its own   a JobSet: replicated job `vllm` (the plan's server argv, a readiness probe
                                         on /health) first, then one replicated job per training node
                                         (`node-<rank>`, its plan command as written), each `dependsOn` the server
                                         being Ready; the JobSet succeeds when the training nodes do

Every pod mounts the frozen config.yaml from a ConfigMap at <mount_path>/<job name>/config.yaml, on the volume that
holds the run dir (launcher.kubernetes.volume), so the worker's run dir is the same on every pod. Addresses are the
pods' DNS names (finalize): the rendezvous on node 0's pod, the server's on its own pod, listening on all of the
pod's addresses (a pod has its own network namespace).

A multi-node vLLM server (a LeaderWorkerSet in vLLM's docs) never comes up: the plan refuses more than one serving
node (TRL 1.16's client talks to one server) and tensor parallelism wider than a node.

What Kubernetes would refuse is found before anything is written: admission.py. Applying and following the
job: cluster.py. Needs the `kubernetes` extra (kubeflow-trainer-api, kubernetes-validate).
"""

import hashlib
import math
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_exp import GIB
from grpo_exp.core import rundir
from grpo_exp.launching.launchers.kubernetes import yaml_text
from grpo_exp.planning import host_memory
from grpo_exp.planning.placement import Plan
from grpo_exp.planning.planner import MemoryPlan

MANIFESTS = "kubernetes.yaml"  # in the run dir, beside plan.json: every object, in the order kubectl applies them
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "grpo-exp"}

# Kubeflow Trainer's torch plugin (pkg/runtime/framework/plugins/torch/torch.go, constants.go): the trainer's
# replicated job and container are named `node`, the rendezvous is node 0's pod on port 29500, and the node rank is
# the pod's completion index. PET_* are torchrun's own environment names for its arguments.
TRAINER_NODE = "node"
TRAINER_PORT = 29500
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
PET_FLAGS = {  # torchrun's flag -> the variable it reads in its place
    "--nnodes": "PET_NNODES",
    "--nproc-per-node": "PET_NPROC_PER_NODE",
    "--node-rank": "PET_NODE_RANK",
    "--master-addr": "PET_MASTER_ADDR",
    "--master-port": "PET_MASTER_PORT",
}

# Names. A pod's hostname is <job>-<replicated job>-<job index>-<pod index>, a DNS label (63 characters). A job's
# name is held to 20 characters, the limit reported for a job in a Kubeflow Trainer 2.4 runtime (not found in its
# source here; the TrainJob CRD itself allows 63): a name that fits both is never the reason a job does not start.
NAME_MAX = 20

# GPU visibility is the device plugin's on Kubernetes: a pod sees the GPUs it was given, numbered from 0.
GPU_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "GRPO_EXP_VLLM_GPUS")
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES")  # a TrainJob's runtime sets PET_* instead


def kind(cfg: DictConfig) -> str:
    """TrainJob or JobSet: what launcher.kubernetes.kind asks for, `auto` by the layout."""
    asked = cfg.launcher.kubernetes.kind
    if asked == "auto":
        return "JobSet" if cfg.vllm.mode == "server" else "TrainJob"
    return {"trainjob": "TrainJob", "jobset": "JobSet"}[asked]


def job_name(cfg: DictConfig, run_dir: Path | None) -> str:
    """launcher.kubernetes.job_name, else grpo-<experiment>-<6 hex of the run dir>: each run (each trial of a
    sweep) its own job, within NAME_MAX (two runs of the same name: 1 in 16 million; action=run refuses a name the
    namespace holds already)."""
    given = cfg.launcher.kubernetes.job_name
    if given is not None:
        return str(given)
    tag = hashlib.sha1(str(run_dir or cfg.experiment).encode()).hexdigest()[:6]
    stem = re.sub(r"[^a-z0-9]+", "-", str(cfg.experiment).lower()).strip("-")[: NAME_MAX - len("grpo--") - len(tag)]
    return f"grpo-{stem.rstrip('-')}-{tag}" if stem else f"grpo-{tag}"


def pod_host(name: str, replicated_job: str) -> str:
    """The DNS name of the first pod of `replicated_job`: JobSet's <jobset>-<rjob>-<job>-<pod>.<subdomain>; a
    TrainJob's JobSet is named after it, and its trainer is replicated job `node`."""
    return f"{name}-{replicated_job}-0-0.{name}"


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    """The addresses of a Kubernetes run, set in the config every pod reads: the job's name, the rendezvous on
    node 0's pod (a TrainJob's at the port Kubeflow's runtime fixes), the server on its own pod, listening on the
    pod's addresses. (`auto` ports are TRL's defaults here: ports.resolve_auto.)"""
    k = cfg.launcher.kubernetes
    k.job_name = name = job_name(cfg, run_dir)
    first_node = TRAINER_NODE if kind(cfg) == "TrainJob" else f"{TRAINER_NODE}-0"
    cfg.topology.master_addr = pod_host(name, first_node)
    if kind(cfg) == "TrainJob":
        cfg.topology.master_port = TRAINER_PORT
    if cfg.vllm.mode == "server":
        cfg.vllm.server_host = pod_host(name, "vllm")
        if cfg.vllm.server_bind is None:
            cfg.vllm.server_bind = "0.0.0.0"  # the pod's own network namespace; the trainers come from other pods


def run_dir_in_pods(cfg: DictConfig) -> str:
    k = cfg.launcher.kubernetes
    return f"{k.mount_path.rstrip('/')}/{k.job_name}"


def build(cfg: DictConfig, plan: Plan, memory: MemoryPlan) -> list[dict]:
    """The run's objects: the ConfigMap, then the TrainJob or JobSet, each passed through its model (a value of
    the wrong type, or a key the model does not keep, is a ValueError; admission.validate checks the rest)."""
    workload = _trainjob(cfg, plan, memory) if kind(cfg) == "TrainJob" else _jobset(cfg, plan, memory)
    return [_configmap(cfg), workload]


def notes(cfg: DictConfig) -> list[str]:
    """What the plan's manifests leave to the user."""
    k = cfg.launcher.kubernetes
    out = [f"kubernetes: {kind(cfg)} {k.job_name} in namespace {k.namespace} (<run dir>/{MANIFESTS})"]
    if k.image is None:
        out.append("kubernetes: launcher.kubernetes.image is null: the manifests name a placeholder image")
    if k.volume is None:
        out.append("kubernetes: launcher.kubernetes.volume is null: the run dir is an emptyDir, lost with the pod")
    return out


def _metadata(cfg: DictConfig, name: str) -> dict:
    k = cfg.launcher.kubernetes
    labels = {**MANAGED_BY, "grpo-exp/experiment": str(cfg.experiment)}
    if k.queue is not None:
        labels[KUEUE_QUEUE_LABEL] = str(k.queue)
    return {"name": name, "namespace": k.namespace, "labels": labels}


def _configmap(cfg: DictConfig) -> dict:
    from kubeflow_trainer_api.models import IoK8sApiCoreV1ConfigMap

    text = rundir.config_text(cfg)
    meta = _metadata(cfg, f"{cfg.launcher.kubernetes.job_name}-config")
    return yaml_text.through(
        IoK8sApiCoreV1ConfigMap,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {rundir.CONFIG: text}},
    )


def _volumes(cfg: DictConfig) -> tuple[list[dict], list[dict]]:
    """Every pod's volumes and its container's mounts: the run dir's volume, config.yaml inside it, /dev/shm."""
    k = cfg.launcher.kubernetes
    run = {"persistentVolumeClaim": {"claimName": k.volume}} if k.volume else {"emptyDir": {}}
    volumes = [
        {"name": "runs", **run},
        {"name": "config", "configMap": {"name": f"{k.job_name}-config"}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},  # NCCL and vLLM's workers share memory through /dev/shm
    ]
    mounts = [
        {"name": "runs", "mountPath": k.mount_path},
        {
            "name": "config",
            "mountPath": f"{run_dir_in_pods(cfg)}/{rundir.CONFIG}",
            "subPath": rundir.CONFIG,
            "readOnly": True,
        },
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    return volumes, mounts


def _pod_spec_extras(cfg: DictConfig) -> dict:
    k = cfg.launcher.kubernetes
    extras: dict[str, Any] = {}
    if k.node_selector:
        extras["nodeSelector"] = {str(key): str(v) for key, v in k.node_selector.items()}
    if k.tolerations:
        extras["tolerations"] = OmegaConf.to_container(k.tolerations, resolve=True)
    if k.service_account is not None:
        extras["serviceAccountName"] = str(k.service_account)
    return extras


def pod_argv(cfg: DictConfig, argv: list[str], drop: tuple[str, ...] = ()) -> list[str]:
    """A plan command as a pod runs it: the image's `python`, config.yaml where the pods mount it, and without the
    torchrun flags in `drop` (a TrainJob's runtime gives them as PET_* variables)."""
    out = ["python", *argv[1:]]
    if out[-1].endswith(rundir.CONFIG):
        out[-1] = f"{run_dir_in_pods(cfg)}/{rundir.CONFIG}"
    return [a for a in out if a.split("=", 1)[0] not in drop]


def _env(variables: dict[str, str], leave_out: tuple[str, ...]) -> list[dict]:
    return [{"name": k, "value": str(v)} for k, v in variables.items() if k not in leave_out]


def _resources(cfg: DictConfig, gpus: int, processes: int, memory_gib: float) -> dict:
    """Requests: the GPUs, cpus_per_process per process, the host RAM planned; the memory limit adds the headroom."""
    k = cfg.launcher.kubernetes
    requests = {"cpu": str(k.cpus_per_process * max(processes, 1)), "memory": f"{math.ceil(memory_gib)}Gi"}
    limits = {"memory": f"{math.ceil(memory_gib * k.memory_headroom)}Gi"}
    if gpus:
        requests[k.gpu_resource] = limits[k.gpu_resource] = str(gpus)
    return {"requests": requests, "limits": limits}


def _host(memory: MemoryPlan, node_rank: int) -> dict:
    """Node `node_rank`'s host RAM plan (host_memory.py; plan.json's `host` has one entry per kind of node)."""
    return next(entry for entry in memory.host if node_rank in entry["nodes"])


def _host_gib(memory: MemoryPlan, node_rank: int) -> float:
    return _host(memory, node_rank)["peak_gib"]


def server_gib(plan: Plan, memory: MemoryPlan, node_rank: int) -> float:
    """The host RAM of the vLLM server's pod: all of a serving node's plan; on node 0 beside training, the server's
    share of it (its processes' runtime on GPUs, its engine on CPU)."""
    node = plan.nodes[node_rank]
    if not node.train_procs:
        return _host_gib(memory, node_rank)
    if plan.device == "cpu":
        return _host(memory, node_rank)["components_gib"].get("vllm_server", 0.0)
    gpus = len(node.vllm_gpus)
    return (host_memory.HOST_RUNTIME_VLLM_SERVER + gpus * host_memory.HOST_RUNTIME_VLLM_WORKER) / GIB


def _trainjob(cfg: DictConfig, plan: Plan, memory: MemoryPlan) -> dict:
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    k = cfg.launcher.kubernetes
    node = plan.nodes[0]
    _, mounts = _volumes(cfg)
    memory_gib = max(_host_gib(memory, n.node_rank) for n in plan.nodes)
    gpus = len(node.train_gpus)
    trainer = {
        "image": k.image or "<launcher.kubernetes.image>",
        # --standalone is a one-node rendezvous of torchrun's own: the runtime's PET_* name node 0's pod instead
        "command": pod_argv(cfg, trainjob_command(node.commands["train"]), drop=(*PET_FLAGS, "--standalone")),
        "env": _env(node.env["train"], GPU_VISIBILITY + RENDEZVOUS_ENV),
        "numNodes": len(plan.nodes),
        "numProcPerNode": node.train_procs,
        "resourcesPerNode": _resources(cfg, gpus, node.train_procs, memory_gib),
    }
    pod_patch = _pod(cfg, {"name": TRAINER_NODE, "volumeMounts": mounts}, trains=True)
    patch = {
        "manager": "grpo-exp",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": TRAINER_NODE, "template": {"spec": {"template": {"spec": pod_patch}}}}]
                }
            }
        },
    }
    body = {
        "apiVersion": TRAINJOB_API,
        "kind": "TrainJob",
        "metadata": _metadata(cfg, k.job_name),
        "spec": {
            "runtimeRef": {"name": k.runtime, "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }
    return yaml_text.through(TrainerV1alpha1TrainJob, body)


def trainjob_command(argv: list[str]) -> list[str]:
    """The plan's training command as torchrun: one process on one node runs the worker directly, which a
    TrainJob's torch runtime (numProcPerNode 1) runs under torchrun as well."""
    if "torch.distributed.run" in argv:
        return argv
    return [argv[0], "-m", "torch.distributed.run", *argv[1:]]


def _jobset(cfg: DictConfig, plan: Plan, memory: MemoryPlan) -> dict:
    from kubeflow_trainer_api.models import JobsetV1alpha2JobSet

    k = cfg.launcher.kubernetes
    name = k.job_name
    server_node = plan.vllm["server_node"]
    jobs = []
    if server_node is not None:
        jobs.append(_replicated_job("vllm", _server_pod(cfg, plan, memory, server_node)))
    training = [n for n in plan.nodes if n.train_procs]
    for node in training:
        pod = _training_pod(cfg, plan, memory, node)
        if server_node == node.node_rank:  # the 7+1 layout: the server's GPUs are on this node, beside it
            pod["affinity"] = {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_beside("vllm", name)]}
            }
        job = _replicated_job(f"{TRAINER_NODE}-{node.node_rank}", pod)
        if server_node is not None:
            job["dependsOn"] = [{"name": "vllm", "status": "Ready"}]
        jobs.append(job)
    body = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": _metadata(cfg, name),
        "spec": {
            # pods reach each other by hostname, before they are ready (torchrun's rendezvous runs before that)
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "replicatedJobs": jobs,
            "successPolicy": {
                "operator": "All",
                "targetReplicatedJobs": [j["name"] for j in jobs if j["name"] != "vllm"],
            },
            "failurePolicy": {"maxRestarts": k.max_restarts},
        },
    }
    return yaml_text.through(JobsetV1alpha2JobSet, body)


def _beside(replicated_job: str, jobset: str) -> dict:
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset, "jobset.sigs.k8s.io/replicatedjob-name": replicated_job}
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}


def _replicated_job(name: str, pod: dict) -> dict:
    job_spec = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,  # a failed pod fails the JobSet, which restarts every job together (failurePolicy)
        "template": {"metadata": {"labels": dict(MANAGED_BY)}, "spec": {"restartPolicy": "Never", **pod}},
    }
    return {"name": name, "replicas": 1, "template": {"spec": job_spec}}


def _container(cfg: DictConfig, name: str, argv: list[str], env: list[dict], resources: dict) -> dict:
    k = cfg.launcher.kubernetes
    _, mounts = _volumes(cfg)
    return {
        "name": name,
        "image": k.image or "<launcher.kubernetes.image>",
        "imagePullPolicy": k.image_pull_policy,
        "command": argv,
        "env": env,
        "resources": resources,
        "volumeMounts": mounts,
    }


def _training_pod(cfg: DictConfig, plan: Plan, memory: MemoryPlan, node) -> dict:
    host = _host_gib(memory, node.node_rank)
    if node.vllm_gpus or (plan.device == "cpu" and "vllm" in node.commands):
        host -= server_gib(plan, memory, node.node_rank)
    container = _container(
        cfg,
        TRAINER_NODE,
        pod_argv(cfg, node.commands["train"]),
        _env(node.env["train"], GPU_VISIBILITY),
        _resources(cfg, len(node.train_gpus), node.train_procs, host),
    )
    container["ports"] = [{"containerPort": int(cfg.topology.master_port), "name": "rendezvous"}]
    return _pod(cfg, container, trains=True)


def _pod(cfg: DictConfig, container: dict, trains: bool) -> dict:
    """A pod spec around `container`: the volumes, the launcher.kubernetes scheduling keys, and for a training pod
    the time to save a checkpoint when it is stopped."""
    volumes, _ = _volumes(cfg)
    grace = {"terminationGracePeriodSeconds": grace_s(cfg)} if trains else {}
    return {**_pod_spec_extras(cfg), **grace, "volumes": volumes, "containers": [container]}


def grace_s(cfg: DictConfig) -> int:
    """How long an evicted or deleted training pod has between SIGTERM and SIGKILL: the ranks save a checkpoint at
    the step boundary within preemption.grace_s (torchrun gives them at least 30 s), then exit; Kubernetes' default
    30 s would cut the save short."""
    return math.ceil(max(cfg.preemption.grace_s, 30)) + 30


def _server_pod(cfg: DictConfig, plan: Plan, memory: MemoryPlan, node_rank: int) -> dict:
    node = plan.nodes[node_rank]
    gpus = len(node.vllm_gpus)
    container = _container(
        cfg,
        "vllm",
        pod_argv(cfg, node.commands["vllm"]),
        _env(node.env["vllm"], GPU_VISIBILITY),
        _resources(cfg, gpus, gpus or 1, server_gib(plan, memory, node_rank)),
    )
    port = int(cfg.vllm.server_port)
    health = {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10}
    container["ports"] = [{"containerPort": port, "name": "vllm"}]
    container["readinessProbe"] = health  # the training nodes start once it answers (dependsOn Ready)
    # loading the model and capturing CUDA graphs takes minutes: probed for vllm.server_timeout before it counts
    container["startupProbe"] = {**health, "failureThreshold": max(1, math.ceil(cfg.vllm.server_timeout / 10))}
    return _pod(cfg, container, trains=False)


def write(run_dir: Path, objects: list[dict]) -> Path:
    path = Path(run_dir) / MANIFESTS
    path.write_text(yaml_text.dump(objects))
    return path
