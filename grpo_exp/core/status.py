"""The one status type: how a run (or one of its ranks) ended, or where it stands. summary.json's and every rank
record's `status` is one of these; core/outcome.py maps each to its exit code and concludes a run's from its ranks'.
"""

from enum import Enum


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
    INTERRUPTED = "interrupted"
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # a key of a dict that a JSON file's plain string finds
