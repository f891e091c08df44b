"""launcher=kubernetes, action=run: apply the run's manifests (<run dir>/kubernetes.yaml) with kubectl and follow
the job's conditions to its end, as launcher=slurm follows its job. What the cluster says lands in summary.json:

    running      the job exists and is not finished (summary "kubernetes": its kind, name, phase, restarts)
    preempted    suspended (Kueue evicted it, or someone set spec.suspend): followed until it resumes
    resubmitted  a JobSet restarted its jobs after a failure (failurePolicy.maxRestarts): the ranks resume from the
                 last checkpoint on the volume; summary "kubernetes.restarts" counts them
    completed    the TrainJob's Complete, the JobSet's Completed condition
    failed       the Failed condition, with its reason and message; a container the kernel killed for memory
                 (OOMKilled) makes it an `oom` of kind host, naming the pod

Ctrl-C (or SIGTERM) deletes the job and ends the run as interrupted. Every call goes through `kubectl()`, the one
place a cluster is asked; its answers are the API's JSON, read with the field's models.
"""

import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.core import outcome, rundir
from grpo_exp.core.records import Status
from grpo_exp.launching import launch
from grpo_exp.launching.launchers.kubernetes import manifests

log = logging.getLogger(__name__)

RESOURCE = {"TrainJob": "trainjobs.trainer.kubeflow.org", "JobSet": "jobsets.jobset.x-k8s.io"}
DONE = {"TrainJob": "Complete", "JobSet": "Completed"}  # each API's name for its success condition
UNANSWERED_POLLS = 3  # kubectl get failing this many polls in a row ends the run as failed (the job may go on)


class KubectlFailed(outcome.LaunchFailed):
    """kubectl refused or could not reach the cluster."""


def kubectl(*args: str, stdin: str | None = None) -> str:
    """Run kubectl with `args`; its stdout, or KubectlFailed with its message."""
    try:
        found = subprocess.run(
            [shutil.which("kubectl") or "kubectl", *args], input=stdin, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        raise KubectlFailed(f"kubectl {' '.join(args[:2])}: no answer from the cluster in 120 s") from None
    if found.returncode != 0:
        raise KubectlFailed(f"kubectl {' '.join(args[:2])}: {found.stderr.strip() or f'exit {found.returncode}'}")
    return found.stdout


def run(cfg: DictConfig, run_dir: Path) -> int:
    """Apply, follow to the end, conclude this run's record; the exit code (outcome.EXIT_*)."""
    k = cfg.launcher.kubernetes
    kind = manifests.kind(cfg)
    kubectl("apply", "-n", k.namespace, "-f", str(run_dir / manifests.MANIFESTS))
    log.info(
        "applied %s %s in namespace %s; watch it: kubectl get %s %s -n %s -w",
        kind,
        k.job_name,
        k.namespace,
        RESOURCE[kind],
        k.job_name,
        k.namespace,
    )
    previous = launch.arm_stop_signals()
    try:
        ended = follow(cfg, run_dir, kind)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, a closed terminal: the job goes with the driver
        kubectl("delete", RESOURCE[kind], k.job_name, "-n", k.namespace, "--wait=false")  # a second signal waits
        log.warning("interrupted: deleted %s %s", kind, k.job_name)
        ended = {"status": Status.INTERRUPTED, "error": None}
    finally:
        launch.disarm(previous)
    rundir.write_rank_record(run_dir, 0, {**ended, "time": time.time()})
    return outcome.EXIT_CODES[ended["status"]]


def follow(cfg: DictConfig, run_dir: Path, kind: str) -> dict:
    """Poll the job every launcher.kubernetes.poll_s until it completes or fails; how it ended, as a rank record."""
    k = cfg.launcher.kubernetes
    last, unanswered = None, 0
    while True:
        try:
            answer = kubectl("get", RESOURCE[kind], k.job_name, "-n", k.namespace, "-o", "json")
        except KubectlFailed:  # an API server that restarts, a network blip: the job goes on without us
            unanswered += 1
            if unanswered > UNANSWERED_POLLS:
                raise
            time.sleep(k.poll_s)
            continue
        unanswered = 0
        state = job_state(kind, read_job(kind, answer))
        if state != last:
            outcome.note(run_dir, kubernetes={"kind": kind, "name": k.job_name, **state})
            log.info(
                "%s %s: %s%s", kind, k.job_name, state["phase"], f" ({state['reason']})" if state.get("reason") else ""
            )
            last = state
        if state["phase"] == "completed":
            return {"status": Status.COMPLETED, "error": None}
        if state["phase"] == "failed":
            return failure(cfg, state)
        time.sleep(k.poll_s)


def read_job(kind: str, text: str) -> dict:
    """The API's answer for the job, read through its model (a malformed answer is an error, not a guess)."""
    from kubeflow_trainer_api.models import JobsetV1alpha2JobSet, TrainerV1alpha1TrainJob

    model = TrainerV1alpha1TrainJob if kind == "TrainJob" else JobsetV1alpha2JobSet
    return model.from_dict(json.loads(text)).to_dict()


def job_state(kind: str, job: dict) -> dict:
    """phase (running, preempted, completed, failed), the condition's reason and message, and a JobSet's restarts."""
    status = job.get("status") or {}
    held = {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}
    restarts = {"restarts": status.get("restarts", 0)} if kind == "JobSet" else {}
    for phase, condition in (("completed", DONE[kind]), ("failed", "Failed"), ("preempted", "Suspended")):
        if condition in held:
            return {
                "phase": phase,
                "reason": held[condition].get("reason"),
                "message": held[condition].get("message"),
                **restarts,
            }
    return {"phase": "running", **restarts}


def failure(cfg: DictConfig, state: dict) -> dict:
    """A failed job's record: an `oom` of kind host where the kernel killed a container for memory (the pods say
    so), else `failed` with the job's own reason."""
    k = cfg.launcher.kubernetes
    pods = json.loads(
        kubectl("get", "pods", "-n", k.namespace, "-l", f"jobset.sigs.k8s.io/jobset-name={k.job_name}", "-o", "json")
    )
    for pod, container, reason in terminations(pods):
        if reason == "OOMKilled":
            return {
                "status": Status.OOM,
                "error": f"pod {pod} container {container} was OOMKilled: it went over its memory limit "
                "(launcher.kubernetes.memory_headroom x the host RAM planned)",
                "oom": {"kind": "host", "pod": pod, "container": container, "phase": None, "rank": None},
            }
    return {"status": Status.FAILED, "error": f"{state.get('reason')}: {state.get('message')}"}


def terminations(pods: dict):
    """(pod, container, reason) for every container of `pods` (a PodList) that ended, now or in its last run."""
    from kubeflow_trainer_api.models import IoK8sApiCoreV1PodList

    for pod in IoK8sApiCoreV1PodList.from_dict(pods).to_dict().get("items", []):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            for state in (status.get("state"), status.get("lastState")):
                ended = (state or {}).get("terminated")
                if ended:
                    yield pod["metadata"]["name"], status["name"], ended.get("reason")


def check_cluster(cfg: DictConfig) -> list[Problem]:
    """action=run: what applying needs: kubectl and a cluster that answers it, a job name the namespace does not
    hold yet (applying would change that job), an image, a volume the run dir survives on."""
    k = cfg.launcher.kubernetes
    if shutil.which("kubectl") is None:
        problems = [
            Problem(
                "launcher.name",
                "kubernetes applies its objects with kubectl, which is not on PATH here",
                "install kubectl with a kubeconfig for your cluster, or action=plan to write the manifests only",
            )
        ]
    else:
        problems = _name_taken(cfg)
    if k.image is None:
        problems.append(
            Problem(
                "launcher.kubernetes.image",
                "is null: the pods need an image with grpo_exp and its stack installed",
                "launcher.kubernetes.image=<registry>/<image>:<tag>",
            )
        )
    if k.volume is None:
        problems.append(
            Problem(
                "launcher.kubernetes.volume",
                "is null: the run dir (metrics, summary, checkpoints) would be an emptyDir, lost with its pod",
                "launcher.kubernetes.volume=<a ReadWriteMany PersistentVolumeClaim in the namespace>",
            )
        )
    return problems


def _name_taken(cfg: DictConfig) -> list[Problem]:
    """The cluster asked (kubectl get) whether the namespace holds a job of this name; a cluster that does not
    answer is a problem too."""
    k = cfg.launcher.kubernetes
    resource = RESOURCE[manifests.kind(cfg)]
    try:
        held = kubectl("get", resource, k.job_name, "-n", k.namespace, "--ignore-not-found", "-o", "name")
    except KubectlFailed as exc:
        return [
            Problem("launcher.kubernetes.namespace", f"the cluster does not answer: {exc}", "check your kubeconfig")
        ]
    if not held.strip():
        return []
    return [
        Problem(
            "launcher.kubernetes.job_name",
            f"{held.strip()} exists in namespace {k.namespace} already; applying would change that job",
            f"another job_name, or: kubectl delete {resource} {k.job_name} -n {k.namespace}",
        )
    ]
