"""`launcher=slurm`: one SLURM job through submitit, one task per node. Each task runs a NodeTask:
its node's share of the same plan the driver printed (torchrun with rendezvous on the job's first
host; on node 0 also the vLLM server) via launch.run_node.

Long runs: SLURM sends SIGUSR2 `signal_delay_s` before the time limit to every process of the job;
the ranks save a checkpoint, node 0's task records the run as preempted and requeues the job
(`scontrol requeue`, at most `max_requeues` times); the requeued job resumes from that checkpoint.
Sweeps: the driver submits every trial at once (at most `max_parallel` in flight) and gathers them.
A job that ends without a result (it never started, its credential was revoked, its node failed, an
admin cancelled it, SLURM purged it) ends the run within a poll or two: submitit sees only a result
file, so the driver asks SLURM itself (scontrol, sacct or squeue: whichever answers, accounting or
not) and, where `max_requeues` allows and the job did not end by its own doing, requeues it once more.

The driver composes and freezes the config once; tasks read that file from the shared run dir.
Needs the `slurm` extra (submitit).
"""

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.core import outcome, plain, rundir
from grpo_exp.launching import launch
from grpo_exp.launching.launchers.slurm.states import ENDED, GONE, JobState, ask, ask_all, job_state  # noqa: F401
from grpo_exp.launching.launchers.slurm.task import NodeTask
from grpo_exp.planning.placement import Plan

if TYPE_CHECKING:
    import submitit

log = logging.getLogger(__name__)


def executor(cfg: DictConfig, run_dir: Path, plan: Plan, cluster: str | None = None):
    """A submitit executor for this run. cluster=None: SLURM (sbatch); "local": this machine,
    one local task per node, for rehearsing the launcher without a cluster."""
    import submitit

    s = cfg.launcher.slurm
    ex = submitit.AutoExecutor(folder=run_dir / rundir.SLURM, cluster=cluster)
    local = ex.cluster == "local"
    params = {
        "name": f"grpo_exp-{cfg.experiment}",
        "timeout_min": s.time_min,
        "nodes": 1 if local else cfg.topology.nnodes,
        "tasks_per_node": cfg.topology.nnodes if local else 1,  # one task = one node's share
        "cpus_per_task": s.cpus_per_task,
    }
    if plan.gpus_per_node:
        params["gpus_per_node"] = plan.gpus_per_node
    if s.mem_gb is not None:
        params["mem_gb"] = s.mem_gb
    slurm_only = {
        "slurm_partition": s.partition,
        "slurm_account": s.account,
        "slurm_qos": s.qos,
        "slurm_constraint": s.constraint,
    }
    params.update({k: v for k, v in slurm_only.items() if v is not None})
    if not local:
        params["slurm_signal_delay_s"] = s.signal_delay_s  # sbatch --signal=USR2@<s>: time to save a checkpoint
    # requeue asked where the run may requeue (clusters with JobRequeue=0 need it asked), refused where it may
    # not: SLURM would otherwise requeue a job after a node failure behind the driver's max_requeues
    additional = {} if local else {"requeue": True} if s.max_requeues else {"no-requeue": True}
    additional.update(plain.mapping(s.additional))
    if additional:
        params["slurm_additional_parameters"] = additional
    ex.update_parameters(**params)
    return ex


# sbatch's refusals, by the words of its message -> the key that asked for it
REFUSALS = (
    ("partition", "launcher.slurm.partition"),
    ("account", "launcher.slurm.account"),
    ("qos", "launcher.slurm.qos"),
    ("feature", "launcher.slurm.constraint"),
    ("generic resource", "topology.gpus_per_node"),
    ("time limit", "launcher.slurm.time_min"),
    ("memory", "launcher.slurm.mem_gb"),
)


class Refused(outcome.LaunchFailed):
    """sbatch refused the job (a partition, account or resource the cluster does not have)."""


def test_only(cfg: DictConfig, plan: Plan) -> list[Problem]:
    """The launch preflight of launcher=slurm: `sbatch --test-only` on the very script submitit would submit,
    so a partition, account, QOS or resource the cluster refuses is exit 2 naming its key, before the run
    dir holds anything. Nothing is submitted."""
    import shutil
    import tempfile

    if cfg.launcher.slurm.cluster is not None:
        return []
    if shutil.which("sbatch") is None:
        return [
            Problem(
                "launcher.name",
                "slurm needs sbatch, which is not on PATH here",
                "run on the cluster's login node, or launcher.slurm.cluster=local to rehearse on this machine",
            )
        ]
    with tempfile.TemporaryDirectory() as scratch:
        slurm_executor = executor(cfg, Path(scratch), plan)._executor  # the script submitit itself writes
        script = Path(scratch) / "test_only.sh"
        script.write_text(slurm_executor._make_submission_file_text("true", "test_only"))
        answer = ask_all("sbatch", "--test-only", str(script))
    if answer is None or answer[0] == 0:
        return []
    return [_refusal(answer[1])]


def _refusal(message: str) -> Problem:
    lines = [line for line in message.strip().splitlines() if line.strip()]
    said = lines[0].removeprefix("sbatch: error: ") if lines else "sbatch refused the job"
    key = next((k for words, k in REFUSALS if words in message.lower()), "launcher.slurm")
    return Problem(key, f"SLURM refuses the job: {said}", f"give {key} a value this cluster has (sinfo, sacctmgr)")


def submit(cfg: DictConfig, run_dir: Path, plan: Plan):
    """Submit the run's job; Refused (with sbatch's words) when SLURM will not take it."""
    import submitit

    try:
        job = executor(cfg, run_dir, plan, cfg.launcher.slurm.cluster).submit(NodeTask(str(run_dir / rundir.CONFIG)))
    except submitit.core.utils.FailedJobError as exc:
        raise Refused(str(_refusal(str(exc)))) from None
    outcome.note(run_dir, slurm_job_id=str(job.job_id))
    log.info("submitted job %s (%d node(s)); logs in %s", job.job_id, cfg.topology.nnodes, run_dir / rundir.SLURM)
    return job


class _SacctOnce(logging.Filter):
    """submitit warns "Bypassing sacct error" at every poll on a cluster without accounting: say it
    once, at debug level (submitit then knows a job only by its result file; job_state() asks
    scontrol and squeue)."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "Bypassing sacct error" not in record.getMessage():
            return True
        if not _SacctOnce.said:
            _SacctOnce.said = True
            log.debug(
                "sacct fails here (no SLURM accounting); submitit reads job states from squeue: %s", record.getMessage()
            )
        return False


# Trials this driver submitted and has not gathered yet: a sweep's jobs run at once.
PENDING: list["Submitted"] = []


def submit_pending(cfg: DictConfig, run_dir: Path, plan: Plan) -> None:
    """Submit a sweep trial without waiting for it; with max_parallel jobs in flight, first wait
    until one of them ends."""
    if len(PENDING) >= cfg.launcher.slurm.max_parallel:
        gather(until_running=cfg.launcher.slurm.max_parallel - 1)
    PENDING.append(Submitted(submit(cfg, run_dir, plan), run_dir, cfg.launcher.slurm.max_requeues))


def gather(until_running: int = 0) -> None:
    """Wait for the pending trials until at most `until_running` still run; each that ended gets
    its final summary (outcome.concluded)."""
    for submitted, code in wait(list(PENDING), until_running):
        summary = outcome.concluded(submitted.run_dir, code, submitted.started)
        log.info("%s: %s (job %s)", submitted.run_dir.name, summary["status"], submitted.job.job_id)
        PENDING.remove(submitted)


def submit_and_wait(cfg: DictConfig, run_dir: Path, plan: Plan) -> int:
    [(_, code)] = wait([Submitted(submit(cfg, run_dir, plan), run_dir, cfg.launcher.slurm.max_requeues)])
    return code


# --- what SLURM says of a job -------------------------------------------------------------------

# Ended states that were not the job's own doing or a person's decision: a requeue may well succeed (a
# launch failure - a revoked credential, a prolog error - ends as FAILED with no exit code of ours).
REQUEUE_MAY_HELP = {"FAILED", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED"}
STATE_POLL_S = 5.0  # how often the driver asks SLURM about a job that has no result yet
RESULT_GRACE_S = 10.0  # an ended job's result file may reach a shared filesystem a little late


@dataclass
class Submitted:
    job: "submitit.Job"
    run_dir: Path
    max_requeues: int = 0
    started: float = 0.0
    asked_at: float = 0.0
    ended_at: float | None = None  # when SLURM was first seen to have ended the job without its result
    requeued: int = 0  # requeues of a job that vanished, by this driver
    lost: list = field(default_factory=list)

    def __post_init__(self):
        self.started = self.started or time.time()

    def done(self) -> bool:
        """Its result file is there. A SLURM job is only looked for by that file: submitit would ask sacct at
        each poll, which fails without accounting (vanished() asks scontrol and squeue instead)."""
        if type(self.job).__name__ == "SlurmJob":
            return self.job.paths.result_pickle.exists()
        return self.job.done()

    def vanished(self) -> bool:
        """True once SLURM has ended the job and no result came: its summary then says why (after a
        requeue where max_requeues allows one, the job is waited for again)."""
        if type(self.job).__name__ != "SlurmJob" or time.time() - self.asked_at < STATE_POLL_S:
            return False  # submitit's local executor watches its own processes
        self.asked_at = time.time()
        state = job_state(str(self.job.job_id))
        if state is None or not state.ended:
            self.ended_at = None
            return False
        self.ended_at = self.ended_at or time.time()
        # node 0 said why it was ending the run (outcome.ending): no result is coming that could say more
        ending = rundir.read_summary(self.run_dir).get("ending")
        if (not ending and time.time() - self.ended_at < RESULT_GRACE_S) or self.done():
            return False
        return not self._requeue(state, ending)

    def _requeue(self, state: JobState, ending: str | None) -> bool:
        restarts = state.restarts if state.restarts is not None else self.requeued
        why = f"SLURM job {self.job.job_id} ended {state.state}" + (f" ({state.reason})" if state.reason else "")
        self.lost.append({"state": state.state, "reason": state.reason, "time": time.time()})
        # a run that was already ending by its own cause is not SLURM's to retry
        if not ending and state.state in REQUEUE_MAY_HELP and restarts < self.max_requeues:
            if ask("scontrol", "requeue", str(self.job.job_id)) is not None:
                self.requeued += 1
                self.ended_at = None
                outcome.note(self.run_dir, slurm_lost_attempts=self.lost)
                log.warning("%s without a result: requeued (%d of %d)", why, restarts + 1, self.max_requeues)
                return True
        error = f"{why} without a result: the job never finished its task (see {self.run_dir / rundir.SLURM})"
        if ending:  # the cause node 0 knew, then SLURM's end (its node lost before node 0 had concluded the run)
            error = f"{ending}; then {why} before node 0 had concluded the run (see {self.run_dir / rundir.SLURM})"
        elif state.state == GONE:
            error = f"SLURM job {self.job.job_id} is no longer known to SLURM (purged), and left no result"
        outcome.launch_failed(
            self.run_dir,
            error,
            slurm_state=state.state,
            slurm_reason=state.reason,
            slurm_lost_attempts=self.lost,
            wall_s=time.time() - self.started,
        )
        log.error(error)
        return False


def wait(jobs: list[Submitted], until_running: int = 0) -> list[tuple[Submitted, int]]:
    """Wait until at most `until_running` of `jobs` still run (0: all done); return those that
    ended, each with its exit code. A stopped driver (Ctrl-C, SIGTERM, SIGHUP) cancels every job:
    no job outlives its driver."""
    submitit_log = logging.getLogger("submitit")
    quiet = _SacctOnce()
    submitit_log.addFilter(quiet)
    previous = launch.arm_stop_signals()
    lost: set[int] = set()  # indices of jobs SLURM ended without a result
    try:
        while True:
            lost |= {i for i, s in enumerate(jobs) if i not in lost and not s.done() and s.vanished()}
            if sum(i not in lost and not s.done() for i, s in enumerate(jobs)) <= until_running:
                break
            time.sleep(0.5)  # done() looks for the result file: cheap; SLURM is asked every STATE_POLL_S
        return [
            (s, outcome.EXIT_FAILED if i in lost else _exit_code(s))
            for i, s in enumerate(jobs)
            if i in lost or s.done()
        ]
    except KeyboardInterrupt:  # a second signal during the cancel is said and waits for it (launch.raise_interrupt)
        for s in jobs:
            s.job.cancel(check=False)
        log.warning("driver stopped: cancelled job(s) %s", ", ".join(str(s.job.job_id) for s in jobs))
        return [(s, outcome.EXIT_INTERRUPTED) for s in jobs]
    finally:
        launch.disarm(previous)
        submitit_log.removeFilter(quiet)


def _exit_code(submitted: Submitted) -> int:
    """The run's exit code: node 0's task concluded the run from every rank's record, so its result is the run's (a
    task of another node may never write one: its processes killed with the machine). The other nodes' tasks still
    running OTHER_NODES_GRACE_S later (a run that did not complete: FAILED_RUN_GRACE_S) are cancelled: no node
    outlives the run it belonged to."""
    job = submitted.job
    first = job.task(0) if job.num_tasks > 1 else job
    try:
        code = first.result()
    except Exception as exc:  # submitit raises when a task failed or the job was cancelled
        log.error("job %s failed: %s", job.job_id, str(exc).splitlines()[0] if str(exc) else exc)
        code = outcome.EXIT_FAILED
    if job.num_tasks > 1 and type(job).__name__ == "SlurmJob":
        _end_other_nodes(job, OTHER_NODES_GRACE_S if code == outcome.EXIT_OK else FAILED_RUN_GRACE_S)
    return code


OTHER_NODES_GRACE_S = 30.0  # a completed run's other nodes write their results within a second or two
FAILED_RUN_GRACE_S = 5.0  # a failed run's other nodes may be cut off or stuck: no reason to keep them long


def _end_other_nodes(job, grace_s: float) -> None:
    deadline = time.time() + grace_s
    waiting = list(range(1, job.num_tasks))
    while waiting and time.time() < deadline:
        state = job_state(str(job.job_id))
        if state is None or state.ended:
            return
        waiting = [t for t in waiting if not job.task(t).paths.result_pickle.exists()]
        time.sleep(0.5)
    if waiting:
        log.warning(
            "node(s) %s of job %s still ran %.0f s after node 0 concluded the run: cancelled",
            ", ".join(map(str, waiting)), job.job_id, grace_s,
        )  # fmt: skip
        ask("scancel", str(job.job_id))
