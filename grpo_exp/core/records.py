"""A run's records, typed: `Status` (how a run or one of its ranks ended, or where it stands), a rank's record
(ranks/rank<N>.json) and the run's summary (summary.json). core/outcome.py is their one writer: it maps each status
to its exit code and concludes a run's from its ranks'. The metrics both carry are named by core/metrics.py.
"""

from enum import Enum
from typing import TypedDict


class Status(str, Enum):
    """How a run (or one of its ranks) ended, or where it stands: summary.json's and a rank record's `status`. A str,
    so JSON, W&B and comparisons with what a file holds see its value."""

    COMPLETED = "completed"
    PLANNED = "planned"  # action=plan in a sweep: nothing was meant to run
    RUNNING = "running"
    FAILED = "failed"
    INVALID = "invalid"
    PREDICTED_OOM = "predicted_oom"
    OOM = "oom"
    MISMATCH = "mismatch"
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
    STALLED = "stalled"
    NODE_LOST = "node_lost"  # another node went silent mid-run (its link or itself): training/heartbeat.py
    INTERRUPTED = "interrupted"
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # a key of a dict that a JSON file's plain string finds


class OomRecord(TypedDict, total=False):
    """Where and how a rank ran out of memory."""

    kind: str  # cuda | host
    phase: str | None  # the phase that was running (training/phases.py)
    rank: int | None
    node: int  # the OOM killer's: the node it struck
    requested_bytes: int | None
    snapshot: str | None  # the allocator's summary (torch.cuda.memory_summary), or /proc's VmPeak lines
    killed_by: str  # oom_killer: the kernel's OOM killer took it (SIGKILL)
    oom_kills: int  # oom_killer: how far the kernel's OOM-kill counter rose meanwhile


class RankRecord(TypedDict, total=False):
    """ranks/rank<N>.json: how one rank ended (every rank that did not complete writes one; rank 0 always, with the
    run's measurements: memory/peak*, measured/*, plan/*, throughput, its first and last logged metrics)."""

    rank: int  # rundir.write_rank_record adds it
    status: Status
    error: str | None
    time: float
    oom: OomRecord
    lost: dict  # node_lost: {node, host, rank, lost_node, phase}: which node lost whom, in which phase
    phase: str | None  # the phase the rank failed in (training/phases.py), where it knows
    node: int  # the rank's node (torchrun's GROUP_RANK) and host name
    host: str
    global_step: int
    train_runtime_s: float | None
    runtime: dict  # what the run really was (world size, backend, wrapper, ZeRO stage, parameters)
    first_metrics: dict
    final_metrics: dict
    worker_wall_s: float


class Summary(RankRecord, total=False):
    """summary.json: the run's end as the driver concluded it from its ranks' records, with the facts of the run
    (outcome.note) beside the measurements rank 0 recorded."""

    exit_code: int | None  # None while running
    started_at: float
    ended_at: float
    wall_s: float
    world_size: int
    node_rank: int
    resumes: list[dict]  # {from_step, time} per continuation
    preflight_fit: list[dict]  # {key, old, new}: what preflight.on_oom=fit changed
    suggestions: list[dict]  # a predicted OOM's ranked fixes
    failed_at: dict  # the root cause's {rank, node, host, phase}, where a rank failed
    ending: str | None  # the cause node 0 knew while it wound its ranks down (outcome.ending); None: a new attempt
    note: str  # what the status alone does not say (a node without rank 0, a dedicated serving node)
    fits: bool  # action=plan in a sweep: the plan's verdict (planned trials), with its first fix
    suggestion: str | None
    slurm_job_id: str  # launcher=slurm: the job, its restarts, and how SLURM ended a job that left no result
    slurm_restarts: int
    slurm_state: str
    slurm_reason: str | None
    slurm_lost_attempts: list[dict]  # {state, reason, time} per attempt SLURM ended without a result
    kubernetes: dict  # launcher=kubernetes: the Job's (or JobSet's) {kind, name, phase, reason, ...} as last seen
    silent_ranks: list[dict]  # {rank, phase}: ranks of a failed run that left no record (killed, their node lost)
