"""launcher=kubernetes: the plan's three layouts as the objects Kubernetes runs (golden manifests), checked by the
field's models, the Kubernetes schemas and kubectl; every pod's torchrun command equal to the plan's for its node;
the seed cases refused before anything is written; applying and following a job against the API's
answers (tests/fixtures/kubernetes/responses/: written from the APIs' types; no cluster runs here to record them)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_exp.core import outcome, rundir
from grpo_exp.launching.launchers.kubernetes import admission as kubernetes_checks
from grpo_exp.launching.launchers.kubernetes import cluster as kubernetes_run
from grpo_exp.launching.launchers.kubernetes import manifests as kubernetes
from tests.helpers import FIXTURES, run_job

GOLDEN = FIXTURES / "kubernetes"
NAME = "launcher.kubernetes.job_name=grpo-golden"  # goldens must not depend on the run dir's hash
LAYOUTS = {
    "colocate_1x8": ["model=qwen7b", "topology=1x8", "deepspeed=zero3", "vllm=colocate"],
    "server_2x8": ["model=qwen7b", "topology=2x8", "vllm=server"],
    "serving_node_4_plus_1": [
        "model=qwen72b",
        "topology=4x8",
        "topology.nnodes=5",
        "deepspeed=zero3",
        "vllm=server",
        "vllm.nodes=1",
        "vllm.tensor_parallel_size=8",
    ],
}


@pytest.fixture(scope="module")
def planned_runs(tmp_path_factory) -> dict[str, Path]:
    """Each layout planned once with launcher=kubernetes, as `grpo-exp ... action=plan` does: its run dir."""
    runs = {}
    for case, overrides in LAYOUTS.items():
        run_dir = tmp_path_factory.mktemp(case) / "run"
        ended = run_job("launcher=kubernetes", NAME, *overrides, "action=plan", run_dir=run_dir)
        assert ended.code == 0
        runs[case] = run_dir
    return runs


def objects(run_dir: Path) -> list[dict]:
    return list(yaml.safe_load_all((run_dir / kubernetes.MANIFESTS).read_text()))


def pods(workload: dict) -> dict[str, dict]:
    """{replicated job: pod spec} of a JobSet."""
    return {j["name"]: j["template"]["spec"]["template"]["spec"] for j in workload["spec"]["replicatedJobs"]}


@pytest.mark.parametrize("case", LAYOUTS)
def test_the_manifests_are_the_golden_ones(case, planned_runs):
    """A change to what a cluster is handed shows in review: regenerate with GRPO_EXP_UPDATE_GOLDEN=1."""
    config_map, workload = objects(planned_runs[case])
    assert config_map["data"]["config.yaml"] == (planned_runs[case] / rundir.CONFIG).read_text()  # the frozen file
    config_map["data"]["config.yaml"] = "<the run dir's config.yaml>"
    text = yaml.safe_dump_all([config_map, workload], sort_keys=False, width=120)
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("GRPO_EXP_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs: GRPO_EXP_UPDATE_GOLDEN=1 regenerates it"


def test_training_alone_or_colocated_is_a_trainjob_on_the_torch_runtime(planned_runs):
    config_map, job = objects(planned_runs["colocate_1x8"])
    assert (config_map["kind"], job["kind"], job["apiVersion"]) == ("ConfigMap", "TrainJob", kubernetes.TRAINJOB_API)
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (1, 8)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    names = {e["name"] for e in trainer["env"]}
    assert not names & {"CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "NODE_RANK"}  # the device plugin's and the runtime's


def test_a_server_is_a_jobset_whose_server_starts_first_and_whose_trainers_decide_success(planned_runs):
    _, jobset = objects(planned_runs["server_2x8"])
    jobs = {j["name"]: j for j in jobset["spec"]["replicatedJobs"]}
    assert list(jobs) == ["vllm", "node-0", "node-1"]
    assert jobs["node-0"]["dependsOn"] == jobs["node-1"]["dependsOn"] == [{"name": "vllm", "status": "Ready"}]
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["node-0", "node-1"]}
    spec = pods(jobset)
    gpus = {name: int(p["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) for name, p in spec.items()}
    assert gpus == {"vllm": 1, "node-0": 7, "node-1": 8}  # the 7+1 layout of node 0, and node 1 whole
    beside = spec["node-0"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert beside["labelSelector"]["matchLabels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "vllm"
    assert beside["topologyKey"] == "kubernetes.io/hostname" and "affinity" not in spec["node-1"]
    assert spec["vllm"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"


def test_the_server_runs_the_plans_argv_and_every_pod_mounts_the_frozen_config(planned_runs):
    for case in ("server_2x8", "serving_node_4_plus_1"):
        plan = json.loads((planned_runs[case] / rundir.PLAN).read_text())
        _, jobset = objects(planned_runs[case])
        (served,) = [n["commands"]["vllm"] for n in plan["nodes"] if "vllm" in n["commands"]]
        server = pods(jobset)["vllm"]["containers"][0]
        assert server["command"] == ["python", *served[1:]]  # the image's python, the plan's argv
        assert "--host" in served and served[served.index("--host") + 1] == "0.0.0.0"  # the pod's own addresses
        for pod in pods(jobset).values():
            (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "config"]
            assert mount["mountPath"] == "/runs/grpo-golden/config.yaml" and mount["subPath"] == "config.yaml"
    _, dedicated = objects(planned_runs["serving_node_4_plus_1"])
    spec = pods(dedicated)
    assert list(spec) == ["vllm", "node-0", "node-1", "node-2", "node-3"]
    assert all("affinity" not in p for p in spec.values())  # the server has a node of its own


def test_requests_are_the_plans_gpus_cpus_and_host_ram(planned_runs):
    plan = json.loads((planned_runs["server_2x8"] / rundir.PLAN).read_text())
    host = {e["node"]: e["peak_gib"] for e in plan["host"]}
    spec = pods(objects(planned_runs["server_2x8"])[1])
    server, node0, node1 = (spec[n]["containers"][0]["resources"] for n in ("vllm", "node-0", "node-1"))
    server_gib = kubernetes.server_gib(_plan("server_2x8"), plan, 0)
    assert server_gib == 6.0  # vLLM's API server and engine (4 GiB) and one GPU worker (2 GiB): host_memory.py
    assert node0["requests"]["memory"] == f"{int(-(-(host[0] - server_gib) // 1))}Gi"
    assert node1["requests"]["memory"] == f"{int(-(-host[1] // 1))}Gi"
    assert node1["limits"]["memory"] == f"{int(-(-host[1] * 1.2 // 1))}Gi"  # launcher.kubernetes.memory_headroom
    assert (node0["requests"]["cpu"], node1["requests"]["cpu"], server["requests"]["cpu"]) == ("56", "64", "8")


def _plan(case: str):
    from tests.helpers import planned

    return planned("launcher=kubernetes", NAME, *LAYOUTS[case]).plan


# ----------------------------------------------------------------------------------------- torchrun from PET_*


def runtime_env(trainjob: dict, node_rank: int) -> dict[str, str]:
    """What Kubeflow Trainer's torch plugin gives the trainer container of node `node_rank` (torch.go,
    EnforceMLPolicy): numNodes, numProcPerNode, the completion index, node 0's pod, port 29500."""
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"]["trainer"]
    return {
        "PET_NNODES": str(trainer["numNodes"]),
        "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
        "PET_NODE_RANK": str(node_rank),  # fieldRef: the pod's job-completion-index
        "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": "29500",
    }


def torchrun_args(argv: list[str], env: dict[str, str], monkeypatch) -> dict:
    """What torchrun makes of `python -m torch.distributed.run ...` in `env`: its own parser, which reads PET_*."""
    from torch.distributed.run import get_args_parser

    assert argv[1:3] == ["-m", "torch.distributed.run"], argv
    for name in kubernetes.PET_FLAGS.values():
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = get_args_parser().parse_args(argv[3:])  # the parser takes PET_* as its defaults when it is built
    fields = ("nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port", "rdzv_conf", "module")
    found = {f: str(getattr(args, f)) for f in fields}
    if ":" not in found["nnodes"]:  # "2" is torchrun's "2:2" (min:max nodes)
        found["nnodes"] = f"{found['nnodes']}:{found['nnodes']}"
    found["worker"] = [args.training_script, *args.training_script_args[:-1]]  # the config path differs: checked
    return found


@pytest.mark.parametrize("case", LAYOUTS)
def test_every_pods_torchrun_is_the_plans_command_for_its_node(case, planned_runs, monkeypatch):
    plan = json.loads((planned_runs[case] / rundir.PLAN).read_text())
    _, workload = objects(planned_runs[case])
    training = [n for n in plan["nodes"] if n["train_procs"]]
    if workload["kind"] == "TrainJob":
        argv = workload["spec"]["trainer"]["command"]
        pod_runs = [(argv, runtime_env(workload, n["node_rank"])) for n in training]
    else:
        spec = pods(workload)
        pod_runs = [(spec[f"node-{n['node_rank']}"]["containers"][0]["command"], {}) for n in training]
    for node, (argv, env) in zip(training, pod_runs, strict=True):
        command = kubernetes.trainjob_command(node["commands"]["train"])
        planned = torchrun_args(command, {}, monkeypatch)
        in_pod = torchrun_args(argv, env, monkeypatch)
        assert argv[-1] == f"/runs/grpo-golden/{rundir.CONFIG}" and command[-1].endswith(rundir.CONFIG)
        if "--standalone" in command:  # one node: torchrun's own local rendezvous, the pod's is its own name
            for f in ("master_addr", "master_port", "rdzv_conf"):
                planned.pop(f), in_pod.pop(f)
        assert in_pod == planned, f"node {node['node_rank']}"
        assert int(in_pod["node_rank"]) == node["node_rank"] and int(in_pod["nproc_per_node"]) == node["train_procs"]


# ----------------------------------------------------------------------------------------- checked before apply


def test_every_manifest_passes_the_kubernetes_schemas_and_kubectl(planned_runs):
    cfg = _cfg("server_2x8")
    for run_dir in planned_runs.values():
        found = objects(run_dir)
        assert kubernetes_checks.validate(found, cfg) == []
        inside = [job for obj in found for _, job in kubernetes_checks._jobs_inside(obj)]
        assert inside and all(kubernetes_checks._schema_error(job) is None for job in inside)


def _cfg(case: str):
    return _planned(case).cfg


def _planned(case: str):
    from tests.helpers import planned

    return planned("launcher=kubernetes", NAME, *LAYOUTS[case])


def test_the_schemas_refuse_what_a_cluster_would():
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": ["8"]}}}],
                }
            }
        },
    }
    assert "resources.limits.cpu" in kubernetes_checks._schema_error(job)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_kubectl_reads_the_manifests_and_refuses_a_broken_one(planned_runs):
    found = objects(planned_runs["server_2x8"])
    assert kubernetes_checks.kubectl_dry_run(found, "default") is None
    broken = [{**found[0], "metadata": {**found[0]["metadata"], "name": True}}]  # a name of the wrong type
    assert "metadata.name" in kubernetes_checks.kubectl_dry_run(broken, "default")
    unknown = [{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}]
    assert "unable to recognize" in kubernetes_checks.kubectl_dry_run(unknown, "default")  # a kind no cluster serves


def test_launcher_keys_reach_every_pod(tmp_path):
    ended = run_job(
        "launcher=kubernetes",
        NAME,
        *LAYOUTS["server_2x8"],
        "action=plan",
        "launcher.kubernetes.image=ghcr.io/me/grpo:1",
        "launcher.kubernetes.namespace=rl",
        "launcher.kubernetes.queue=team-a",
        "launcher.kubernetes.service_account=trainer",
        "launcher.kubernetes.volume=runs-rwx",
        "+launcher.kubernetes.node_selector.pool=h100",
        "launcher.kubernetes.tolerations=[{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]",
        run_dir=tmp_path / "run",
    )
    assert ended.code == 0
    config_map, jobset = objects(tmp_path / "run")
    for obj in (config_map, jobset):
        assert (
            obj["metadata"]["namespace"] == "rl" and obj["metadata"]["labels"][kubernetes.KUEUE_QUEUE_LABEL] == "team-a"
        )
    for pod in pods(jobset).values():
        assert pod["serviceAccountName"] == "trainer" and pod["nodeSelector"] == {"pool": "h100"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert pod["containers"][0]["image"] == "ghcr.io/me/grpo:1"
        (runs,) = [v for v in pod["volumes"] if v["name"] == "runs"]
        assert runs["persistentVolumeClaim"] == {"claimName": "runs-rwx"}


# ----------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "overrides,says",
    [
        # the seed cases: no GPU left for vLLM; nodes that disagree (7 and 8 processes in one TrainJob) and a trainer
        # given the server's GPU (a TrainJob's nodes all get the same GPUs)
        (["model=qwen7b", "topology=1x8", "vllm=server", "vllm.gpus=8"], "vllm.gpus: reserves 8 of node 0's 8 GPUs"),
        (
            ["model=qwen7b", "topology=2x8", "vllm=server", "launcher.kubernetes.kind=trainjob"],
            "the plan's nodes train 7 and 8 processes",
        ),
        (["model=qwen7b", "topology=1x8", "launcher.kubernetes.job_name=Grpo_Run"], "is not a Kubernetes job name"),
        (["model=qwen7b", "topology=1x8", "launcher.kubernetes.job_name=grpo-a-very-long-name"], "at most 20"),
        (["model=qwen7b", "topology=1x8", "launcher.kubernetes.queue=team a"], "not a Kubernetes label value"),
        (
            ["model=qwen7b", "topology=1x8", "launcher.kubernetes.node_selector={pool_: x}"],
            "not a Kubernetes label key",
        ),
        (["topology=1x8", "vllm=server"], "model.name_or_path: is null: the tiny model is built on the machine"),
        (["model=qwen7b", "topology=1x8", "launcher.kubernetes.tolerations=[{key: 1}]"], "launcher.kubernetes"),
    ],
)
def test_refused_before_any_manifest_is_written(overrides, says, tmp_path, capsys):
    run_dir = tmp_path / "run"
    ended = run_job("launcher=kubernetes", *overrides, "action=plan", run_dir=run_dir)
    err = capsys.readouterr().err
    assert ended.code == outcome.EXIT_INVALID and says in err, err
    assert not run_dir.exists()  # nothing written: no config, no plan, no manifests


def test_resume_is_the_jobs_own_on_kubernetes(planned_runs, tmp_path, capsys):
    ended = run_job(f"resume={planned_runs['colocate_1x8']}", run_dir=tmp_path / "fresh")
    assert ended.code == outcome.EXIT_INVALID
    assert "resume: continues a run in its run dir here, but a Kubernetes run's dir" in capsys.readouterr().err


def test_training_pods_have_the_time_to_save_a_checkpoint_when_evicted(planned_runs):
    """SIGTERM, then SIGKILL after terminationGracePeriodSeconds: longer than preemption.grace_s (60 s)."""
    trainjob = objects(planned_runs["colocate_1x8"])[1]
    patch = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert patch["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90
    spec = pods(objects(planned_runs["server_2x8"])[1])
    assert spec["node-0"]["terminationGracePeriodSeconds"] == spec["node-1"]["terminationGracePeriodSeconds"] == 90


def test_no_pod_gives_one_process_several_gpus(planned_runs):
    """nn.DataParallel starts where one process sees several GPUs: every training pod runs a process per GPU."""
    for run_dir in planned_runs.values():
        _, workload = objects(run_dir)
        if workload["kind"] == "TrainJob":
            trainer = workload["spec"]["trainer"]
            assert int(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"]) == trainer["numProcPerNode"]
            continue
        for name, pod in pods(workload).items():
            if name != "vllm":
                container = pod["containers"][0]
                procs = next(a for a in container["command"] if a.startswith("--nproc-per-node="))
                assert procs == f"--nproc-per-node={container['resources']['limits']['nvidia.com/gpu']}"


def test_gpu_requests_must_fit_a_node(planned_runs):
    _, jobset = objects(planned_runs["server_2x8"])
    assert kubernetes_checks.gpu_problems([jobset], 8, "nvidia.com/gpu") == []
    found = kubernetes_checks.gpu_problems([jobset], 7, "nvidia.com/gpu")  # node 1: 8; node 0: 7 beside the 1
    assert [p.why.split(" asks")[0] for p in found] == [
        "JobSet grpo-golden replicated job node-0",
        "JobSet grpo-golden replicated job node-1",
    ]
    assert "asks for 8 GPUs on one node, which has 7" in found[0].why


def test_an_object_too_large_for_etcd_is_refused(planned_runs):
    _, jobset = objects(planned_runs["server_2x8"])
    assert kubernetes_checks.size_problems(jobset) == []
    many = {**jobset, "spec": {**jobset["spec"], "replicatedJobs": jobset["spec"]["replicatedJobs"] * 400}}
    (found,) = kubernetes_checks.size_problems(many)  # ~1200 replicated jobs: a 1200-node run
    assert found.key == "topology.nnodes" and "etcd stores at most 1572864" in found.why


def test_derived_job_names_are_short_dns_labels_one_per_run(tmp_path):
    cfg = _cfg("colocate_1x8")
    cfg.experiment = "Qwen2.5_7B gsm8k sweep"
    cfg.launcher.kubernetes.job_name = None
    names = {kubernetes.job_name(cfg, tmp_path / f"trial{i}") for i in range(20)}
    assert len(names) == 20  # a sweep's trials: separate jobs
    assert all(kubernetes_checks.DNS_LABEL.match(n) and len(n) <= kubernetes.NAME_MAX for n in names), names


def test_action_run_needs_kubectl_an_image_and_a_volume(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(kubernetes_checks.shutil, "which", lambda name: None)
    ended = run_job("launcher=kubernetes", NAME, *LAYOUTS["colocate_1x8"], run_dir=tmp_path / "run")
    err = capsys.readouterr().err
    assert ended.code == outcome.EXIT_INVALID
    for says in (
        "kubectl, which is not on PATH",
        "launcher.kubernetes.image: is null",
        "launcher.kubernetes.volume: is null",
    ):
        assert says in err, err


# ----------------------------------------------------------------------------------------- apply and follow


class Cluster:
    """kubectl answered from the API answers in tests/fixtures/kubernetes/responses/<name>.json: each `get` of the
    job returns the next state; every call is kept."""

    def __init__(self, states: list[str], pods: str | None = None, interrupt_at: int | None = None, holds: str = ""):
        self.states, self.pods, self.interrupt_at, self.calls = list(states), pods, interrupt_at, []
        self.holds = holds

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        self.calls.append(args)
        if "--ignore-not-found" in args:  # action=run's preflight: is the job's name free?
            return self.holds
        if args[:2] == ("get", "pods"):
            return _response(self.pods)
        if args[0] == "get":
            if self.interrupt_at is not None and len([c for c in self.calls if c[0] == "get"]) > self.interrupt_at:
                raise KeyboardInterrupt
            return _response(self.states.pop(0) if len(self.states) > 1 else self.states[0])
        return ""


def _response(name: str) -> str:
    return (GOLDEN / "responses" / f"{name}.json").read_text()


def _apply_and_follow(tmp_path, monkeypatch, cluster, case: str = "server_2x8"):
    """`grpo-exp launcher=kubernetes <case>` (action=run) with kubectl answered by `cluster`."""
    monkeypatch.setattr(kubernetes_run, "kubectl", cluster)
    monkeypatch.setattr(kubernetes_checks.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(kubernetes_run.time, "sleep", lambda s: None)
    return run_job(
        "launcher=kubernetes",
        NAME,
        *LAYOUTS[case],
        "launcher.kubernetes.image=ghcr.io/me/grpo:1",
        "launcher.kubernetes.volume=runs-rwx",
        run_dir=tmp_path / "run",
    )


def test_a_jobset_that_is_preempted_restarted_and_completes(tmp_path, monkeypatch):
    cluster = Cluster(["jobset_running", "jobset_suspended", "jobset_restarted", "jobset_completed"])
    ended = _apply_and_follow(tmp_path, monkeypatch, cluster)
    assert ended.code == 0 and ended.summary["status"] == "completed"
    assert cluster.calls[1] == ("apply", "-n", "default", "-f", str(tmp_path / "run" / kubernetes.MANIFESTS))
    assert ended.summary["kubernetes"] == {
        "kind": "JobSet",
        "name": "grpo-golden",
        "phase": "completed",
        "reason": "AllJobsCompleted",
        "message": "jobset completed successfully",
        "restarts": 1,
    }


def test_a_job_name_the_namespace_holds_is_refused_before_anything_is_applied(tmp_path, monkeypatch, capsys):
    cluster = Cluster(["jobset_running"], holds="jobset.jobset.x-k8s.io/grpo-golden\n")
    ended = _apply_and_follow(tmp_path, monkeypatch, cluster)
    assert ended.code == outcome.EXIT_INVALID and not (tmp_path / "run").exists()
    assert "jobset.jobset.x-k8s.io/grpo-golden exists in namespace default already" in capsys.readouterr().err
    assert [c[0] for c in cluster.calls] == ["get"]  # asked, nothing applied


def test_a_pod_the_kernel_killed_for_memory_is_a_host_oom(tmp_path, monkeypatch):
    cluster = Cluster(["trainjob_running", "trainjob_failed"], pods="pods_oomkilled")
    ended = _apply_and_follow(tmp_path, monkeypatch, cluster, case="colocate_1x8")
    assert ended.code == outcome.EXIT_OOM and ended.summary["status"] == "oom"
    assert ended.summary["oom"]["kind"] == "host" and ended.summary["oom"]["pod"] == "grpo-golden-node-0-1-x7k2p"


def test_a_failed_job_says_why(tmp_path, monkeypatch):
    cluster = Cluster(["trainjob_failed"], pods="pods_error")
    ended = _apply_and_follow(tmp_path, monkeypatch, cluster, case="colocate_1x8")
    assert ended.code == outcome.EXIT_FAILED
    assert ended.summary["error"] == "FailedJobs: jobset failed due to one or more job failures"


def test_ctrl_c_deletes_the_job(tmp_path, monkeypatch):
    cluster = Cluster(["jobset_running"], interrupt_at=2)
    ended = _apply_and_follow(tmp_path, monkeypatch, cluster)
    assert ended.code == outcome.EXIT_INTERRUPTED and ended.summary["status"] == "interrupted"
    assert cluster.calls[-1] == ("delete", "jobsets.jobset.x-k8s.io", "grpo-golden", "-n", "default", "--wait=false")


def test_a_cluster_that_stops_answering_for_a_poll_or_two_is_waited_for(tmp_path, monkeypatch):
    cluster = Cluster(["jobset_running", "jobset_completed"])
    answers = iter([cluster, *[None] * 3, cluster])  # a poll answered, three not (UNANSWERED_POLLS), then answered

    def flaky(*args, stdin=None):
        if args[0] == "get" and "--ignore-not-found" not in args and next(answers) is None:
            raise kubernetes_run.KubectlFailed("kubectl get: the server is currently unable to handle the request")
        return cluster(*args)

    ended = _apply_and_follow(tmp_path, monkeypatch, flaky)
    assert ended.code == 0 and ended.summary["status"] == "completed"


def test_a_cluster_that_does_not_answer_is_refused_before_anything_is_applied(tmp_path, monkeypatch, capsys):
    def unreachable(*args, stdin=None):
        raise kubernetes_run.KubectlFailed("kubectl get: The connection to the server localhost:8080 was refused")

    ended = _apply_and_follow(tmp_path, monkeypatch, unreachable, case="colocate_1x8")
    assert ended.code == outcome.EXIT_INVALID
    assert "launcher.kubernetes.namespace: the cluster does not answer" in capsys.readouterr().err


def test_kubectls_refusal_fails_the_run_with_its_words(tmp_path, monkeypatch):
    def refuse(*args, stdin=None):
        if args[0] == "apply":
            raise kubernetes_run.KubectlFailed('kubectl apply: error: namespaces "default" is forbidden')
        return ""  # the job's name is free

    ended = _apply_and_follow(tmp_path, monkeypatch, refuse, case="colocate_1x8")
    assert ended.code == outcome.EXIT_FAILED and "is forbidden" in ended.summary["error"]


def test_the_kept_answers_are_what_the_apis_models_read():
    for path in sorted((GOLDEN / "responses").glob("*.json")):
        body = json.loads(path.read_text())
        if body["kind"] == "PodList":
            assert list(kubernetes_run.terminations(body))
        else:
            kind = body["kind"]
            assert kubernetes_run.read_job(kind, path.read_text())["metadata"]["name"] == "grpo-golden"


def test_the_docs_excerpts_are_from_the_golden_manifests():
    """docs/kubernetes.md quotes the objects: every line it shows is in a golden file."""
    from tests.test_docs import ROOT, fenced_blocks

    golden = "".join(p.read_text() for p in GOLDEN.glob("*.yaml")).splitlines()
    shown = [text for lang, text in fenced_blocks(ROOT / "docs" / "kubernetes.md") if lang == "yaml"]
    assert shown
    for text in shown:
        assert all(line in golden for line in text.splitlines()), text


@pytest.mark.slow  # the real CLI: a Hydra multirun
def test_each_trial_of_a_sweep_is_its_own_job(cli):
    result, sweep_dir = cli(
        "launcher=kubernetes", *LAYOUTS["server_2x8"], "action=plan", "trainer.num_generations=4,6", multirun=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    names = [objects(sweep_dir / trial)[1]["metadata"]["name"] for trial in "01"]
    assert names[0] != names[1] and all(n.startswith("grpo-default-") for n in names)
    configs = [objects(sweep_dir / trial)[0]["data"]["config.yaml"] for trial in "01"]
    assert [yaml.safe_load(c)["trainer"]["num_generations"] for c in configs] == [4, 6]


@pytest.mark.e2e  # two real training processes, started as Kubeflow's torch runtime starts the TrainJob's pods
def test_a_trainjobs_pods_train_as_written(tmp_path, model_cache):
    """The TrainJob of a two-node CPU run, its pods rehearsed on this machine: each runs the manifest's command with
    the trainer env it names and the PET_* Kubeflow gives node <i> (the rendezvous on loopback instead of node 0's
    pod), and reads config.yaml from the ConfigMap at its mount path on a folder standing in for the volume."""
    from grpo_exp.launching.ports import free_port
    from tests.helpers import driver_env

    ended = run_job(
        "launcher=kubernetes",
        NAME,
        "topology=cpu2x1",
        "trainer.max_steps=1",
        "logger=none",
        "action=plan",
        run_dir=tmp_path / "plan",
    )
    assert ended.code == 0
    config_map, trainjob = objects(tmp_path / "plan")
    volume = tmp_path / "volume"
    (volume / "grpo-golden").mkdir(parents=True)
    (volume / "grpo-golden" / rundir.CONFIG).write_text(config_map["data"][rundir.CONFIG])
    trainer = trainjob["spec"]["trainer"]
    argv = [sys.executable, *[a.replace("/runs/", f"{volume}/") for a in trainer["command"][1:]]]
    env = {**driver_env(model_cache), **{e["name"]: e["value"] for e in trainer["env"]}}
    loopback = {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(free_port())}
    pods = [
        subprocess.Popen(
            argv,
            env={**env, **runtime_env(trainjob, i), **loopback},
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in range(trainer["numNodes"])
    ]
    outputs = [pod.communicate(timeout=600)[0] for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    record = json.loads((volume / "grpo-golden" / rundir.RANKS / "rank0.json").read_text())
    assert record["status"] == "completed" and record["global_step"] == 1
    assert record["runtime"]["world_size"] == 2 and record["runtime"]["backend"] == "gloo"
