"""`launcher=slurm`: one SLURM job through submitit, one task per node. Each task runs a NodeTask:
its node's share of the same plan the driver printed (torchrun with rendezvous on the job's first
host; on node 0 also the vLLM server) via launch.run_node.

Long runs: SLURM sends SIGUSR2 `signal_delay_s` before the time limit to every process of the job;
the ranks save a checkpoint, node 0's task records the run as preempted and requeues the job
(`scontrol requeue`, at most `max_requeues` times); the requeued job resumes from that checkpoint.
Sweeps: the driver submits every trial at once (at most `max_parallel` in flight) and gathers them.

The driver composes and freezes the config once; tasks read that file from the shared run dir.
Needs the `slurm` extra (submitit).
"""

import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp.core import outcome, rundir
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
    additional = {"requeue": True} if s.max_requeues and not local else {}  # clusters with JobRequeue=0 need it asked
    additional.update(OmegaConf.to_container(s.additional))
    if additional:
        params["slurm_additional_parameters"] = additional
    ex.update_parameters(**params)
    return ex


def submit(cfg: DictConfig, run_dir: Path, plan: Plan):
    job = executor(cfg, run_dir, plan, cfg.launcher.slurm.cluster).submit(NodeTask(str(run_dir / rundir.CONFIG)))
    rundir.write_summary(run_dir, slurm_job_id=str(job.job_id))
    log.info("submitted job %s (%d node(s)); logs in %s", job.job_id, cfg.topology.nnodes, run_dir / rundir.SLURM)
    return job


class _SacctOnce(logging.Filter):
    """submitit warns "Bypassing sacct error" at every poll on a cluster without accounting: say it
    once, at debug level (job states still come from squeue)."""

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
    PENDING.append(Submitted(submit(cfg, run_dir, plan), run_dir))


def gather(until_running: int = 0) -> None:
    """Wait for the pending trials until at most `until_running` still run; each that ended gets
    its final summary (outcome.concluded)."""
    for submitted, code in wait(list(PENDING), until_running):
        summary = outcome.concluded(submitted.run_dir, code, submitted.started)
        log.info("%s: %s (job %s)", submitted.run_dir.name, summary["status"], submitted.job.job_id)
        PENDING.remove(submitted)


def submit_and_wait(cfg: DictConfig, run_dir: Path, plan: Plan) -> int:
    [(_, code)] = wait([Submitted(submit(cfg, run_dir, plan), run_dir)])
    return code


@dataclass
class Submitted:
    job: object  # submitit.Job
    run_dir: Path
    started: float = 0.0

    def __post_init__(self):
        self.started = self.started or time.time()


def wait(jobs: list[Submitted], until_running: int = 0) -> list[tuple[Submitted, int]]:
    """Wait until at most `until_running` of `jobs` still run (0: all done); return those that
    ended, each with its exit code. A stopped driver (Ctrl-C, SIGTERM, SIGHUP) cancels every job:
    no job outlives its driver."""
    submitit_log = logging.getLogger("submitit")
    quiet = _SacctOnce()
    submitit_log.addFilter(quiet)
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while sum(not s.job.done() for s in jobs) > until_running:
            time.sleep(0.5)  # done() looks for the result file: cheap
        return [(s, _exit_code(s)) for s in jobs if s.job.done()]
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


def _raise_interrupt(*_):
    raise KeyboardInterrupt


class NodeTask:
    """What each SLURM task runs (submitit pickles it): this node's share of the plan. Node 0's task
    also concludes the run (its summary.json) and, when the ranks were preempted, requeues the job."""

    def __init__(self, config_path: str):
        self.config_path = config_path

    def __call__(self) -> int:
        import submitit

        from grpo_exp.launching import launch
        from grpo_exp.planning import placement

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
            rundir.record_resume(run_dir, checkpoint[1] if checkpoint else 0)
            outcome.write_status(run_dir, "running", slurm_restarts=restarts)
        started = time.time()
        if env.global_rank == 0:
            rundir.write_summary(run_dir, started_at=started)  # the job's start, not its submission
        plan = placement.make_plan(cfg, self.config_path, detected_gpus=launch.visible_gpus())
        log_name = rundir.LOG if env.global_rank == 0 else f"train.node{env.global_rank}.log"
        code = launch.run_node(cfg, run_dir, plan.nodes[env.global_rank], log_path=run_dir / log_name)
        if env.global_rank != 0:
            return code
        summary = outcome.conclude(run_dir, code, time.time() - started)
        if summary["status"] == "preempted" and "SLURM_JOB_ID" in os.environ:
            if restarts < cfg.launcher.slurm.max_requeues:
                log.warning(
                    "preempted at step %s: requeueing job %s (%d of %d)",
                    summary.get("global_step"),
                    env.job_id,
                    restarts + 1,
                    cfg.launcher.slurm.max_requeues,
                )
                subprocess.run(["scontrol", "requeue", env.job_id], check=True, timeout=60)
                raise SystemExit(outcome.EXIT_PREEMPTED)  # no result for submitit: the requeued job gives it
            log.warning(
                "preempted, and launcher.slurm.max_requeues=%d requeues are used up: python -m grpo_exp resume=%s "
                "continues",
                cfg.launcher.slurm.max_requeues,
                run_dir,
            )
        return summary["exit_code"]
