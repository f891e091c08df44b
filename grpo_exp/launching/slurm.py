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
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import Problem
from grpo_exp.core import outcome, rundir
from grpo_exp.core.status import Status
from grpo_exp.launching import launch, versions
from grpo_exp.planning import placement
from grpo_exp.planning.placement import Plan

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
    additional.update(OmegaConf.to_container(s.additional))
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
        answer = _ask_all("sbatch", "--test-only", str(script))
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

# Job states after which SLURM runs the job no more unless it is requeued (squeue(1) JOB STATE CODES).
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "REVOKED",
    "SPECIAL_EXIT",
}
# Ended states that were not the job's own doing or a person's decision: a requeue may well succeed (a
# launch failure - a revoked credential, a prolog error - ends as FAILED with no exit code of ours).
REQUEUE_MAY_HELP = {"FAILED", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED"}
GONE = "GONE"  # no tool knows the job any more: purged from slurmctld's memory, with no accounting
STATE_POLL_S = 5.0  # how often the driver asks SLURM about a job that has no result yet
RESULT_GRACE_S = 10.0  # an ended job's result file may reach a shared filesystem a little late


@dataclass(frozen=True)
class JobState:
    state: str  # SLURM's JobState (RUNNING, FAILED, ...), or GONE
    reason: str | None = None  # SLURM's Reason (NonZeroExitCode, launch_failed_requeued_held, ...)
    restarts: int | None = None  # times SLURM restarted it (scontrol's Restarts)

    @property
    def ended(self) -> bool:
        return self.state in ENDED or self.state == GONE


def _ask_all(*argv: str) -> tuple[int, str] | None:
    """A SLURM tool's exit code and what it said (stderr, then stdout), or None when it is not there."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.returncode, done.stderr + done.stdout


def _ask(*argv: str) -> str | None:
    """A SLURM tool's stdout, or None when it failed or is not there."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def job_state(job_id: str) -> JobState | None:
    """What SLURM says of `job_id`: scontrol (state, reason, restarts; while slurmctld holds the job,
    MinJobAge after its end), sacct (with accounting, long after), squeue (any state slurmctld holds).
    GONE when none of them knows it; None when none of them answers at all (no SLURM tools here)."""
    shown = _ask("scontrol", "show", "job", "-o", str(job_id))
    if shown and (found := re.search(r"\bJobState=(\S+)", shown)):
        reason = re.search(r"\bReason=(\S+)", shown)
        restarts = re.search(r"\bRestarts=(\d+)", shown)
        return JobState(
            found.group(1),
            reason.group(1) if reason and reason.group(1) not in ("None", "(null)") else None,
            int(restarts.group(1)) if restarts else None,
        )
    accounted = _ask("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State")
    if accounted and accounted.strip():
        return JobState(accounted.split()[0])  # "CANCELLED by 0": the state is the first word
    queued = _ask("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T|%r")
    if queued and queued.strip():
        state, _, reason = queued.strip().splitlines()[0].partition("|")
        return JobState(state, reason if reason not in ("", "None") else None)
    if shown is None and accounted is None and queued is None and _ask("scontrol", "version") is None:
        return None  # no SLURM tools to ask: only the result file tells
    return JobState(GONE)


@dataclass
class Submitted:
    job: object  # submitit.Job
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
        if time.time() - self.ended_at < RESULT_GRACE_S or self.done():
            return False
        return not self._requeue(state)

    def _requeue(self, state: JobState) -> bool:
        restarts = state.restarts if state.restarts is not None else self.requeued
        why = f"SLURM job {self.job.job_id} ended {state.state}" + (f" ({state.reason})" if state.reason else "")
        self.lost.append({"state": state.state, "reason": state.reason, "time": time.time()})
        if state.state in REQUEUE_MAY_HELP and restarts < self.max_requeues:
            if _ask("scontrol", "requeue", str(self.job.job_id)) is not None:
                self.requeued += 1
                self.ended_at = None
                outcome.note(self.run_dir, slurm_lost_attempts=self.lost)
                log.warning("%s without a result: requeued (%d of %d)", why, restarts + 1, self.max_requeues)
                return True
        error = f"{why} without a result: the job never finished its task (see {self.run_dir / rundir.SLURM})"
        if state.state == GONE:
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
    previous = {sig: signal.signal(sig, launch.raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
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
    except KeyboardInterrupt:
        for s in jobs:
            s.job.cancel(check=False)
        log.warning("driver stopped: cancelled job(s) %s", ", ".join(str(s.job.job_id) for s in jobs))
        return [(s, outcome.EXIT_INTERRUPTED) for s in jobs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        submitit_log.removeFilter(quiet)


def _exit_code(submitted: Submitted) -> int:
    try:
        codes = submitted.job.results()  # one per task (node)
    except Exception as exc:  # submitit raises when a task failed or the job was cancelled
        log.error("job %s failed: %s", submitted.job.job_id, str(exc).splitlines()[0] if str(exc) else exc)
        return outcome.EXIT_FAILED
    return max(codes, key=lambda c: c != 0)


def _ending(job_id: str) -> str | None:
    """SLURM's state for a job it is ending (scancel, a preemption: COMPLETING, CANCELLED, ...), or None while
    it still runs it: a time-limit warning (SIGUSR2) or a signal alone (`scancel --signal`) leaves it RUNNING."""
    state = job_state(job_id)
    return None if state is None or state.state in ("RUNNING", "SUSPENDED") else state.state


class NodeTask:
    """What each SLURM task runs (submitit pickles it): this node's share of the plan. Node 0's task
    also concludes the run (its summary.json) and, when the ranks were preempted, requeues the job."""

    def __init__(self, config_path: str):
        self.config_path = config_path

    def __call__(self) -> int:
        import submitit

        env = submitit.JobEnvironment()
        cfg = OmegaConf.load(self.config_path)
        # Where this task sits is only known inside the job: the node index, and the first host as
        # the rendezvous (and vLLM server) address. node_rank is left out of the fingerprint check.
        cfg.topology.node_rank = env.global_rank
        cfg.topology.master_addr = env.hostnames[0] if len(env.hostnames) > 1 else "127.0.0.1"
        if cfg.vllm.nodes:  # the last node serves: trainers reach it, and it listens, at its own address
            cfg.vllm.server_host = env.hostnames[-1]
        run_dir = Path(self.config_path).parent
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        if env.global_rank == 0 and restarts:  # a requeued job: the ranks resume from the latest checkpoint
            checkpoint = rundir.latest_checkpoint(run_dir)
            rundir.clear_rank_records(run_dir)
            outcome.record_resume(run_dir, checkpoint[1] if checkpoint else 0)
            outcome.started(run_dir, slurm_restarts=restarts)
        started = time.time()
        if env.global_rank == 0:
            outcome.note(run_dir, started_at=started)  # the job's start, not its submission
        plan = placement.make_plan(cfg, self.config_path, detected_gpus=launch.visible_gpus())
        node = plan.nodes[env.global_rank]
        log_name = rundir.LOG if env.global_rank == 0 else f"train.node{env.global_rank}.log"
        # The driver checked its own machine; this node's packages are only known here.
        refused = versions.check(cfg, serves=bool(node.vllm_gpus), trains=node.train_procs > 0)
        if refused:
            error = f"node {env.global_rank} ({env.hostnames[env.global_rank]}): " + "; ".join(p.why for p in refused)
            rundir.write_rank_record(run_dir, env.global_rank, {"status": Status.INVALID, "error": error})
            code = outcome.EXIT_INVALID
        else:
            code = launch.run_node(cfg, run_dir, node, log_path=run_dir / log_name)
        if env.global_rank != 0:
            return code
        summary = outcome.conclude(run_dir, code, time.time() - started)
        if summary["status"] == Status.PREEMPTED and "SLURM_JOB_ID" in os.environ:
            ending = _ending(env.job_id)
            if ending:  # scancel (a stopped driver, a person) or SLURM's own preemption: a requeue would undo it
                log.warning(
                    "preempted at step %s while SLURM ends job %s (%s): not requeued; python -m grpo_exp "
                    "resume=%s continues",
                    summary.get("global_step"),
                    env.job_id,
                    ending,
                    run_dir,
                )
            elif restarts < cfg.launcher.slurm.max_requeues:
                log.warning(
                    "preempted at step %s: requeueing job %s (%d of %d)",
                    summary.get("global_step"),
                    env.job_id,
                    restarts + 1,
                    cfg.launcher.slurm.max_requeues,
                )
                subprocess.run(["scontrol", "requeue", env.job_id], check=True, timeout=60)
                raise SystemExit(outcome.EXIT_PREEMPTED)  # no result for submitit: the requeued job gives it
            else:
                log.warning(
                    "preempted, and launcher.slurm.max_requeues=%d requeues are used up: python -m grpo_exp resume=%s "
                    "continues",
                    cfg.launcher.slurm.max_requeues,
                    run_dir,
                )
        return summary["exit_code"]
