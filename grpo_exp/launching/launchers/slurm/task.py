"""What each task of a `launcher=slurm` job runs (submitit pickles it): this node's share of the plan, with the
node's place read inside the job. Node 0's task also concludes the run (its summary.json) and, when the ranks were
preempted, requeues the job."""

import logging
import os
import subprocess
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp.core import gpus, outcome, rundir
from grpo_exp.core.outcome import LaunchFailed, Mismatch
from grpo_exp.core.records import Status, Summary
from grpo_exp.launching import launch, reachability, versions
from grpo_exp.launching.launchers.slurm import states
from grpo_exp.planning import placement

log = logging.getLogger(__name__)


class NodeTask:
    """What each SLURM task runs (submitit pickles it): this node's share of the plan. Node 0's task
    also concludes the run (its summary.json) and, when the ranks were preempted, requeues the job."""

    def __init__(self, config_path: str):
        self.config_path = config_path

    def __call__(self) -> int:
        import submitit

        env = submitit.JobEnvironment()
        cfg = OmegaConf.load(self.config_path)
        assert isinstance(cfg, DictConfig), f"{self.config_path} is a mapping"
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
            outcome.started(run_dir, slurm_restarts=restarts, ending=None)  # that attempt's cause is not this one's
        started = time.time()
        if env.global_rank == 0:
            outcome.note(run_dir, started_at=started)  # the job's start, not its submission
        cards = gpus.detect()  # this node's: the plan is of them where the topology names none
        for warning in placement.card_warnings(cfg.topology, cards):
            log.warning("node %d: %s", env.global_rank, warning)
        plan = placement.make_plan(cfg, self.config_path, detected_gpus=gpus.count(), cards=cards)
        node = plan.nodes[env.global_rank]
        log_name = rundir.LOG if env.global_rank == 0 else f"train.node{env.global_rank}.log"
        # the job's log (slurm/<job>_<node>_log.out) says where this node is and where it meets the others
        topo = cfg.topology
        print(f"node {env.global_rank}: host {env.hostname}, rendezvous at {topo.master_addr}:"
              f"{topo.master_port}", flush=True)  # fmt: skip
        # The driver checked its own machine; this node's packages and its reach of the other nodes are only known here.
        refused = versions.check(cfg, serves=bool(node.vllm_gpus), trains=node.train_procs > 0)
        refused += reachability.check(cfg, env.global_rank, plan.vllm.get("server_node"))
        if refused:
            error = f"node {env.global_rank} ({env.hostname}): " + "; ".join(
                f"{p.key}: {p.why} ({p.fix})" for p in refused
            )
            rundir.write_rank_record(run_dir, env.global_rank, {"status": Status.INVALID, "error": error})
            code = outcome.EXIT_INVALID
        else:
            code = _run_node(cfg, run_dir, node, run_dir / log_name)
        if env.global_rank != 0:
            return code
        summary = outcome.conclude(run_dir, code, time.time() - started)
        if summary["status"] != Status.COMPLETED and "SLURM_JOB_ID" in os.environ:
            _not_completed(cfg, env.job_id, run_dir, restarts, summary)
        concluded = summary["exit_code"]  # set by conclude (None only while a run is running)
        return concluded if concluded is not None else outcome.EXIT_FAILED


def _run_node(cfg, run_dir: Path, node, log_path: Path) -> int:
    """This node's share, its own ends recorded as the driver records them on one machine (job._launch)."""
    try:
        return launch.run_node(cfg, run_dir, node, log_path=log_path)
    except LaunchFailed as exc:  # the vLLM server never answered, or died (a serving node's too)
        outcome.node_failed(run_dir, node.node_rank, Status.FAILED, str(exc))
        return outcome.EXIT_FAILED
    except Mismatch as exc:  # a dedicated serving node runs another config
        outcome.node_failed(run_dir, node.node_rank, Status.MISMATCH, str(exc))
        return outcome.EXIT_HANG_PREVENTED


def _not_completed(cfg, job_id: str, run_dir: Path, restarts: int, summary: Summary) -> None:
    """Node 0 of a job whose run did not complete: SLURM is asked once whether it requeued the job itself (then the
    next attempt gives the result) or is ending it; a preempted run is requeued by node 0 unless SLURM is ending it."""
    state = states.job_state(job_id)
    _requeued_by_slurm(job_id, state, restarts, summary)
    if summary["status"] == Status.PREEMPTED:
        _requeue(cfg, job_id, state, run_dir, restarts, summary.get("global_step"))


def _requeued_by_slurm(job_id: str, state: states.JobState | None, restarts: int, summary: Summary) -> None:
    """SLURM requeued the job itself (one of its nodes failed or was taken down; JobRequeue): whatever this attempt
    ended as (preempted where the ranks were stopped, failed where a peer's processes were killed first), the next
    attempt resumes from the last checkpoint, and the driver waits for it: no result from this one."""
    if state is not None and state.restarts is not None and state.restarts > restarts:
        log.warning(
            "%s at step %s: SLURM requeued job %s (attempt %d); it resumes from its last checkpoint",
            summary["status"], summary.get("global_step"), job_id, state.restarts + 1,
        )  # fmt: skip
        raise SystemExit(outcome.EXIT_PREEMPTED)


def _requeue(cfg, job_id: str, state: states.JobState | None, run_dir: Path, restarts: int, step) -> None:
    """Node 0 of a preempted job: requeue it (the ranks resume from their checkpoint), unless SLURM itself is ending
    it (scancel, SLURM's own preemption: a requeue would undo it) or the requeues are used up."""
    ending = states.ending(state)
    if ending:
        log.warning(
            "preempted at step %s while SLURM ends job %s (%s): not requeued; python -m grpo_exp resume=%s continues",
            step,
            job_id,
            ending,
            run_dir,
        )
    elif restarts < cfg.launcher.slurm.max_requeues:
        log.warning(
            "preempted at step %s: requeueing job %s (%d of %d)",
            step,
            job_id,
            restarts + 1,
            cfg.launcher.slurm.max_requeues,
        )
        subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=60)
        raise SystemExit(outcome.EXIT_PREEMPTED)  # no result for submitit: the requeued job gives it
    else:
        log.warning(
            "preempted, and launcher.slurm.max_requeues=%d requeues are used up: python -m grpo_exp resume=%s "
            "continues",
            cfg.launcher.slurm.max_requeues,
            run_dir,
        )
