"""launcher=kubernetes, checked before anything is written or applied (job.py calls these where the config and the
plan are checked): what the chosen kind can hold, names and label values as Kubernetes takes them, GPU requests a node
can hold, each pod template against the Kubernetes schemas (kubernetes-validate), and kubectl's client-side dry run of
the whole file, offline.
"""

import importlib.util
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml
from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.core import rundir
from grpo_exp.launching.launchers.kubernetes.manifests import MANIFESTS, NAME_MAX, TRAINER_NODE, build, kind
from grpo_exp.launching.launchers.kubernetes.yaml_text import dump
from grpo_exp.planning.placement import Plan
from grpo_exp.planning.planner import MemoryPlan

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # RFC 1035
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # and at most 63 characters
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
CONFIGMAP_MAX_BYTES = 1 << 20  # a ConfigMap's data, at most (the API server refuses more)
OBJECT_MAX_BYTES = 3 << 19  # 1.5 MiB: etcd's default limit on one request, so on one object (--max-request-bytes)


def _job_name_problems(name: str, plan: Plan) -> list[Problem]:
    """The job's name, and the pod hostnames it makes, as Kubernetes takes them (DNS labels)."""
    problems = []
    longest = f"{name}-{TRAINER_NODE}-{max(len(plan.nodes) - 1, 0)}-0-0"
    if not DNS_LABEL.match(name) or len(name) > NAME_MAX:
        problems.append(
            Problem(
                "launcher.kubernetes.job_name",
                f"'{name}' is not a Kubernetes job name: lowercase letters, digits and '-', starting with a letter, "
                f"at most {NAME_MAX} characters",
                f"launcher.kubernetes.job_name=null (grpo-<experiment>-<hash>), or a name such as {job_name_fix(name)}",
            )
        )
    elif len(longest) > 63:
        problems.append(
            Problem(
                "launcher.kubernetes.job_name",
                f"makes pod hostnames such as {longest} ({len(longest)} characters; a DNS label holds 63)",
                "a shorter launcher.kubernetes.job_name",
            )
        )
    return problems


def check(cfg: DictConfig, plan: Plan) -> list[Problem]:
    """What Kubernetes refuses or cannot express, before any object is built: the layout the kind can hold, names
    and labels, and a model the server's pod can load."""
    k = cfg.launcher.kubernetes
    problems = []
    if (
        importlib.util.find_spec("kubeflow_trainer_api") is None
        or importlib.util.find_spec("kubernetes_validate") is None
    ):
        problems.append(
            Problem(
                "launcher.name",
                "kubernetes builds its objects with kubeflow-trainer-api and checks them with kubernetes-validate, "
                "which are not installed here",
                "pip install 'grpo_exp[kubernetes]'",
            )
        )
    if cfg.resume:
        problems.append(
            Problem(
                "resume",
                "continues a run in its run dir here, but a Kubernetes run's dir and checkpoints are on "
                "launcher.kubernetes.volume: its job resumes itself from its last checkpoint when it restarts "
                "(launcher.kubernetes.max_restarts; Kueue's preemptions too)",
                "start a new run, or resume with launcher=local or launcher=slurm where the run dir is",
            )
        )
    if kind(cfg) == "TrainJob" and cfg.vllm.mode == "server":
        procs = sorted({n.train_procs for n in plan.nodes})
        problems.append(
            Problem(
                "launcher.kubernetes.kind",
                "is trainjob, but a TrainJob runs only its torch nodes, each with the same numProcPerNode and GPUs: "
                f"the plan's nodes train {' and '.join(map(str, procs))} processes, and the vLLM server needs a pod of "
                "its own (a trainer given node 0's 8 GPUs would hold the server's GPU too)",
                "launcher.kubernetes.kind=auto (a JobSet: the server first, then the training nodes)",
            )
        )
    problems += _job_name_problems(k.job_name, plan)
    problems += _label_problems(cfg)
    if cfg.vllm.mode == "server" and cfg.model.name_or_path is None:
        problems.append(
            Problem(
                "model.name_or_path",
                "is null: the tiny model is built on the machine that starts the run, which a vLLM server's pod "
                "cannot see",
                "a hub model id (model=qwen7b, ...), or a model directory on launcher.kubernetes.volume",
            )
        )
    return problems


def job_name_fix(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    cleaned = cleaned if cleaned[:1].isalpha() else f"g{cleaned}"
    return cleaned[:NAME_MAX].rstrip("-") or "grpo"


def _label_problems(cfg: DictConfig) -> list[Problem]:
    k = cfg.launcher.kubernetes
    problems = []
    values = {"experiment": str(cfg.experiment), "launcher.kubernetes.queue": k.queue}
    values.update({f"launcher.kubernetes.node_selector.{key}": v for key, v in (k.node_selector or {}).items()})
    for key, value in values.items():
        if value is not None and (len(str(value)) > 63 or not LABEL_VALUE.match(str(value))):
            problems.append(
                Problem(
                    key,
                    f"'{value}' is not a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.', "
                    "starting and ending with a letter or digit)",
                    "a value of that form",
                )
            )
    for key in k.node_selector or {}:
        if not LABEL_KEY.match(str(key)) or len(str(key).split("/")[-1]) > 63:
            problems.append(
                Problem(
                    "launcher.kubernetes.node_selector",
                    f"'{key}' is not a Kubernetes label key ([prefix/]name, the name at most 63 characters)",
                    "a node label your nodes carry (kubectl get nodes --show-labels)",
                )
            )
    return problems


# The kinds kubectl maps without asking a cluster: discovery answers as a cluster with JobSet and Kubeflow
# Trainer installed gives them, written to a throwaway cache (kubectl reads its discovery cache before the server).
_DISCOVERY = {
    "v1": [("configmaps", "ConfigMap")],
    "jobset.x-k8s.io/v1alpha2": [("jobsets", "JobSet")],
    "trainer.kubeflow.org/v1alpha1": [("trainjobs", "TrainJob")],
}
_OFFLINE_SERVER = "kube.invalid:443"  # never resolved: kubectl answers from the cache


def built(cfg: DictConfig, plan: Plan, memory: MemoryPlan) -> tuple[list[dict], list[Problem]]:
    """The run's objects (kubernetes.py's build) and everything found wrong with them; no objects where a model refused
    a value (pydantic's ValidationError is a ValueError)."""
    try:
        objects = build(cfg, plan, memory)
    except ValueError as exc:
        return [], [_problem(str(exc).replace("\n", "; "))]
    return objects, validate(objects, cfg)


def validate(objects: list[dict], cfg: DictConfig) -> list[Problem]:
    """Kubernetes' own checks, offline: each pod template as a batch/v1 Job against the Kubernetes schemas
    (kubernetes-validate), the ConfigMap's size, and kubectl's client-side dry run of the whole file."""
    problems = []
    for obj in objects:
        for where, job in _jobs_inside(obj):
            error = _schema_error(job)
            if error:
                problems.append(_problem(f"{obj['kind']} {obj['metadata']['name']} {where}: {error}"))
        if obj["kind"] == "ConfigMap" and len(obj["data"][rundir.CONFIG].encode()) > CONFIGMAP_MAX_BYTES:
            problems.append(_problem(f"config.yaml is over {CONFIGMAP_MAX_BYTES} bytes, a ConfigMap's limit"))
        problems += size_problems(obj)
    problems += gpu_problems(objects, cfg.topology.gpus_per_node or 0, cfg.launcher.kubernetes.gpu_resource)
    error = kubectl_dry_run(objects, cfg.launcher.kubernetes.namespace)
    if error:
        problems.append(_problem(f"kubectl create --dry-run=client: {error}"))
    return problems


def size_problems(obj: dict) -> list[Problem]:
    """An object etcd would refuse for its size: a JobSet holds a replicated job per training node (~1.7 KB each),
    so about 900 nodes reach etcd's default 1.5 MiB."""
    size = len(json.dumps(obj).encode())
    if size <= OBJECT_MAX_BYTES:
        return []
    return [
        Problem(
            "topology.nnodes",
            f"makes {obj['kind']} {obj['metadata']['name']} {size} bytes; etcd stores at most {OBJECT_MAX_BYTES} "
            "per object by default",
            "fewer nodes per job, or a cluster whose etcd takes larger objects (--max-request-bytes)",
        )
    ]


def gpu_problems(objects: list[dict], gpus_per_node: int, resource: str) -> list[Problem]:
    """GPU requests a node of `gpus_per_node` GPUs cannot hold: one pod's, or those of the pods affinity keeps on
    one host (a server's pod and node 0's trainer)."""
    problems = []
    for obj in objects:
        host: dict[str, int] = {}  # replicated job -> the GPUs of the pods on its host
        for where, job in _jobs_inside(obj):
            pod = job["spec"]["template"]["spec"]
            asked = sum(int(c["resources"].get("limits", {}).get(resource, 0)) for c in pod["containers"])
            beside = (
                (pod.get("affinity") or {})
                .get("podAffinity", {})
                .get("requiredDuringSchedulingIgnoredDuringExecution", [])
            )
            partners = [t["labelSelector"]["matchLabels"].get("jobset.sigs.k8s.io/replicatedjob-name") for t in beside]
            host[where] = asked + sum(host.get(f"replicated job {p}", 0) for p in partners)
            if host[where] > gpus_per_node:
                problems.append(
                    Problem(
                        "topology.gpus_per_node",
                        f"{obj['kind']} {obj['metadata']['name']} {where} asks for {host[where]} GPUs on one node, "
                        f"which has {gpus_per_node}",
                        "set topology.gpus_per_node to the GPUs your nodes have",
                    )
                )
    return problems


def _problem(why: str) -> Problem:
    return Problem(
        "launcher.kubernetes",
        why,
        "check the launcher.kubernetes values the message names (tolerations, node_selector)",
    )


def _jobs_inside(obj: dict):
    """(where, a batch/v1 Job) for each pod template of a JobSet; a TrainJob's trainer as the pod it patches."""
    if obj["kind"] == "JobSet":
        for job in obj["spec"]["replicatedJobs"]:
            yield (
                f"replicated job {job['name']}",
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": job["name"]},
                    "spec": job["template"]["spec"],
                },
            )
    elif obj["kind"] == "TrainJob":
        trainer = obj["spec"]["trainer"]
        pod = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        pod_spec = dict(pod["template"]["spec"]["template"]["spec"])
        container = {
            "name": TRAINER_NODE,
            "image": trainer["image"],
            "command": trainer["command"],
            "env": trainer["env"],
            "resources": trainer["resourcesPerNode"],
            "volumeMounts": pod_spec.pop("containers")[0]["volumeMounts"],
        }
        spec = {"template": {"spec": {**pod_spec, "restartPolicy": "Never", "containers": [container]}}}
        yield (
            "trainer",
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": obj["metadata"]["name"]}, "spec": spec},
        )


def _schema_error(obj: dict) -> str | None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, desired_version=kubernetes_validate.utils.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(map(str, exc.path))}: {exc.message}"
    return None


def kubectl_dry_run(objects: list[dict], namespace: str) -> str | None:
    """kubectl's reading of the manifests (decode, kind mapping, defaults), with no cluster: None when it takes
    them, its message when not. Skipped (None) where kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        _discovery_cache(root / "cache" / "discovery" / _OFFLINE_SERVER.replace(":", "_"))
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "offline", "cluster": {"server": f"https://{_OFFLINE_SERVER}"}}],
            "users": [{"name": "offline", "user": {"token": "unused"}}],
            "contexts": [
                {"name": "offline", "context": {"cluster": "offline", "user": "offline", "namespace": namespace}}
            ],
            "current-context": "offline",
        }
        (root / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        (root / MANIFESTS).write_text(dump(objects))
        found = subprocess.run(
            [
                kubectl,
                "create",
                "--dry-run=client",
                "--validate=false",
                "-o",
                "name",
                "-f",
                str(root / MANIFESTS),
                "--kubeconfig",
                str(root / "kubeconfig"),
                "--cache-dir",
                str(root / "cache"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    if found.returncode != 0:
        return found.stderr.strip().splitlines()[-1] if found.stderr.strip() else f"exit {found.returncode}"
    return None


def _discovery_cache(folder: Path) -> None:
    groups = []
    for group_version, resources in _DISCOVERY.items():
        group, _, version = group_version.rpartition("/")
        gv = {"groupVersion": group_version, "version": version}
        groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
        listing = {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": [
                {
                    "name": plural,
                    "singularName": k.lower(),
                    "namespaced": True,
                    "kind": k,
                    "verbs": ["create", "get", "delete"],
                }
                for plural, k in resources
            ],
        }
        path = folder / group_version / "serverresources.json" if group else folder / version / "serverresources.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(listing))
    (folder / "servergroups.json").write_text(
        json.dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    )
