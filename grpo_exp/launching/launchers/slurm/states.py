"""What SLURM says of a job, asked of its own tools (scontrol, sacct, squeue) as a person would: the state, the
reason, the restarts; None where no tool is there to ask."""

import re
import subprocess
from dataclasses import dataclass

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
GONE = "GONE"  # no tool knows the job any more: purged from slurmctld's memory, with no accounting


@dataclass(frozen=True)
class JobState:
    state: str  # SLURM's JobState (RUNNING, FAILED, ...), or GONE
    reason: str | None = None  # SLURM's Reason (NonZeroExitCode, launch_failed_requeued_held, ...)
    restarts: int | None = None  # times SLURM restarted it (scontrol's Restarts)

    @property
    def ended(self) -> bool:
        return self.state in ENDED or self.state == GONE


def ask_all(*argv: str) -> tuple[int, str] | None:
    """A SLURM tool's exit code and what it said (stderr, then stdout), or None when it is not there."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.returncode, done.stderr + done.stdout


def ask(*argv: str) -> str | None:
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
    shown = ask("scontrol", "show", "job", "-o", str(job_id))
    if shown and (found := re.search(r"\bJobState=(\S+)", shown)):
        reason = re.search(r"\bReason=(\S+)", shown)
        restarts = re.search(r"\bRestarts=(\d+)", shown)
        return JobState(
            found.group(1),
            reason.group(1) if reason and reason.group(1) not in ("None", "(null)") else None,
            int(restarts.group(1)) if restarts else None,
        )
    accounted = ask("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State")
    if accounted and accounted.strip():
        return JobState(accounted.split()[0])  # "CANCELLED by 0": the state is the first word
    queued = ask("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T|%r")
    if queued and queued.strip():
        state, _, why = queued.strip().splitlines()[0].partition("|")
        return JobState(state, why if why not in ("", "None") else None)
    if shown is None and accounted is None and queued is None and ask("scontrol", "version") is None:
        return None  # no SLURM tools to ask: only the result file tells
    return JobState(GONE)


def ending(state: JobState | None) -> str | None:
    """SLURM's state for a job it is ending (scancel, a preemption: COMPLETING, CANCELLED, ...), or None while
    it still runs it (`state`: job_state's): a time-limit warning (SIGUSR2) or a signal alone (`scancel --signal`)
    leaves it RUNNING."""
    return None if state is None or state.state in ("RUNNING", "SUSPENDED") else state.state
