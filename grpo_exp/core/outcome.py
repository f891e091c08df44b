"""How a run ended: the one owner of statuses, exit codes and who explains a failure.

    a rank's exception  -> classify()  -> ranks/rank<N>.json  (each rank writes only its own record)
    rank 0's end        -> ranks/rank0.json with the run's measurements (peaks, throughput, metrics)
    the driver          -> conclude()  -> summary.json status, exit_code, error (the only writer of the
                           final status: it alone sees every rank's record, the exit code and train.log)

Pure Python apart from classify(), which runs in a training process: the driver imports this module
without torch.
"""

import json
import re
import time
from pathlib import Path
from typing import cast

from grpo_exp.core import rundir, vllm_log
from grpo_exp.core.records import OomRecord, RankRecord, Status, Summary


class Mismatch(RuntimeError):
    """Nodes of one run disagree (their configs, processes per node, versions): status `mismatch`, exit 5."""


class LaunchFailed(RuntimeError):
    """The launch itself failed before training could start (SLURM refused the job, the vLLM server never
    answered): status `failed`, exit 1, with this message."""


# Exit codes of a single run, also summary.json["exit_code"].
EXIT_OK = 0
EXIT_FAILED = 1  # unexpected failure
EXIT_INVALID = 2  # the config is wrong; nothing was launched
EXIT_PREDICTED_OOM = 3  # preflight predicts an OOM; nothing was launched (preflight.on_oom=warn runs anyway)
EXIT_OOM = 4  # a rank ran out of memory (CUDA or host); summary.json["oom"] says where
EXIT_HANG_PREVENTED = 5  # nodes disagree (mismatch), a node never joined or went silent, or training stalled
EXIT_PREEMPTED = 75  # stopped by SIGTERM/SIGUSR1/SIGUSR2 after saving a checkpoint (EX_TEMPFAIL: run it again)
EXIT_INTERRUPTED = 130
EXIT_CODES = {
    Status.COMPLETED: EXIT_OK,
    Status.PLANNED: EXIT_OK,  # action=plan in a sweep: nothing was meant to run
    Status.FAILED: EXIT_FAILED,
    Status.INVALID: EXIT_INVALID,
    Status.PREDICTED_OOM: EXIT_PREDICTED_OOM,
    Status.OOM: EXIT_OOM,
    Status.MISMATCH: EXIT_HANG_PREVENTED,
    Status.RENDEZVOUS_TIMEOUT: EXIT_HANG_PREVENTED,
    Status.STALLED: EXIT_HANG_PREVENTED,
    Status.NODE_LOST: EXIT_HANG_PREVENTED,
    Status.INTERRUPTED: EXIT_INTERRUPTED,
    Status.PREEMPTED: EXIT_PREEMPTED,
}

# Which rank's end explains the run: a config mismatch first, then an OOM over a crash (a peer's
# crash is often just the broken connection an OOM'd rank left), a crash over an interruption;
# the earliest first. A completed or preempted rank explains nothing when another one failed.
_CAUSE_PRIORITY = {
    Status.MISMATCH: 0,
    Status.OOM: 1,
    Status.FAILED: 2,
    Status.INTERRUPTED: 3,
    Status.PREEMPTED: 4,
    Status.COMPLETED: 5,
}

_CPU_OOM = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")
_CUDA_OOM = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1}
_KILLED = "Signal 9 (SIGKILL)"  # torchrun's words for a rank the kernel's OOM killer took
_RENDEZVOUS_TIMEOUT = re.compile(
    r"(Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients "
    r"joined\.|DistNetworkError.*|RendezvousTimeoutError.*)"
)


def note(run_dir: Path, **facts) -> Summary:
    """summary.json gains facts of the run besides how it ended (a SLURM job id, the start time, the changes
    preflight.on_oom=fit made, a server's memory): every write of summary.json goes through this module."""
    return rundir.write_summary(run_dir, **facts)


def record_resume(run_dir: Path, from_step: int) -> Summary:
    """summary.json["resumes"] gains {from_step, time}: how often and from where a run continued."""
    resumes = rundir.read_summary(run_dir).get("resumes", [])
    return note(run_dir, resumes=[*resumes, {"from_step": from_step, "time": time.time()}])


def refused(run_dir: Path, status: Status, **fields) -> Summary:
    """A run that ends before anything launches: invalid, predicted_oom (a planning trial: planned)."""
    return write_status(run_dir, status, **fields)


def started(run_dir: Path, **fields) -> Summary:
    """The run is launched (or relaunched: a requeued SLURM job): running, no exit code yet."""
    return write_status(run_dir, Status.RUNNING, **fields)


def launch_failed(run_dir: Path, error: str, **fields) -> Summary:
    """The launch itself ended the run without a rank's record: SLURM refused or lost the job, a serving node's vLLM
    server died."""
    return write_status(run_dir, Status.FAILED, error=error, **fields)


def ending(run_dir: Path, cause: str) -> Summary:
    """Node 0 knows why the run ends (a serving node's server lost) and is winding its ranks down: said at once, so a
    job SLURM kills meanwhile (its serving node marked down) still ends naming the cause (slurm.Submitted)."""
    return note(run_dir, ending=cause)


def node_failed(run_dir: Path, node_rank: int, status: Status, error: str) -> None:
    """The driver's (or a SLURM task's) own end of node `node_rank`'s share (its launch failed, a server died, a
    serving node's config differs), recorded as ranks/rank<node_rank>.json: over what that rank recorded itself as it
    was stopped, its measurements kept."""
    path = Path(run_dir) / rundir.RANKS / f"rank{node_rank}.json"
    own = rundir.read_json(path) if path.exists() else {}
    rundir.write_rank_record(run_dir, node_rank, {**own, "status": status, "error": error, "time": time.time()})


def ended_on_node0(run_dir: Path, reported: RankRecord) -> int:
    """A dedicated serving node's end: the status node 0 reported for the run (its result is on node 0); its exit
    code."""
    status = reported.get("status", Status.FAILED)
    status = status if status in EXIT_CODES else Status.FAILED
    write_status(
        run_dir, status, error=reported.get("error"), note="dedicated serving node: the run's result is on node 0"
    )
    return EXIT_CODES[status]


def write_status(run_dir: Path, status: Status, **fields) -> Summary:
    """summary.json gains `status`, its exit code and `fields` (the driver's before and after launch).
    A running run has no exit code yet; an ended one gets its end time (ended_at, beside started_at)."""
    if status == Status.RUNNING:
        return rundir.write_summary(run_dir, status=status, exit_code=None, **fields)
    return rundir.write_summary(run_dir, status=status, exit_code=EXIT_CODES[status], ended_at=time.time(), **fields)


def exit_code(summary: Summary) -> int:
    """An ended run's exit code; a summary.json without one (its processes gone while it still said running) is a
    failure."""
    code = summary.get("exit_code")
    return EXIT_FAILED if code is None else code


def oom_details(exc: BaseException) -> OomRecord | None:
    """{'kind': 'cuda'|'host', 'requested_bytes': ...} when `exc` is an out-of-memory error, else None."""
    import torch

    text = str(exc)
    if isinstance(exc, torch.OutOfMemoryError) or _CUDA_OOM.search(text):
        found = _CUDA_OOM.search(text)
        return {
            "kind": "cuda",
            "requested_bytes": int(float(found.group(1)) * _UNITS[found.group(2)]) if found else None,
        }
    if isinstance(exc, MemoryError) or _CPU_OOM.search(text) or "DefaultCPUAllocator: not enough memory" in text:
        found = _CPU_OOM.search(text)
        return {"kind": "host", "requested_bytes": int(found.group(1)) if found else None}
    return None


def classify(exc: BaseException, rank: int, phases=None) -> RankRecord:
    """A rank's record for the exception that ended it: status oom (where, how much), mismatch,
    interrupted or failed."""
    record: RankRecord = {"error": f"{type(exc).__name__}: {exc}"[:4000], "time": time.time()}
    if phases is not None and phases.failed_phase:
        record["phase"] = phases.failed_phase
    if isinstance(exc, KeyboardInterrupt):
        return {**record, "status": Status.INTERRUPTED, "error": None}
    if isinstance(exc, Mismatch):
        return {**record, "status": Status.MISMATCH, "error": str(exc)}
    oom = oom_details(exc)
    if oom is None:
        return {**record, "status": Status.FAILED}
    snapshot = phases.probe.snapshot() if phases is not None else None
    phase = phases.failed_phase if phases is not None else None
    return {**record, "status": Status.OOM, "oom": {"phase": phase, "rank": rank, **oom, "snapshot": snapshot}}


def read_records(run_dir: Path) -> list[RankRecord]:
    folder = Path(run_dir) / rundir.RANKS
    return [json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))] if folder.is_dir() else []


def root_cause(records: list[RankRecord]) -> RankRecord | None:
    """The record that explains the run (see _CAUSE_PRIORITY), or None without records."""
    if not records:
        return None
    return min(records, key=lambda r: (_CAUSE_PRIORITY.get(r["status"], 2), r.get("time", 0)))


_NOT_FAILURES = (Status.COMPLETED, Status.PREEMPTED, Status.INTERRUPTED)


def _where(record: RankRecord) -> dict:
    """Where a rank's end happened: its rank, node, host and phase, as far as its record says."""
    return {k: record[k] for k in ("rank", "node", "host", "phase") if record.get(k) is not None}


def explain(records: list[RankRecord]) -> Summary:
    """The run's status as rank 0 can tell it before exiting (its W&B summary): the root cause's
    status and error over rank 0's own measurements."""
    rank0 = next((r for r in records if r.get("rank") == 0), RankRecord())
    cause = root_cause(records) or rank0
    # rank 0's fields and its measurements, named by metric (memory/peak*), which no TypedDict can list
    own = cast(Summary, {k: v for k, v in rank0.items() if k not in ("node", "host", "phase")})  # cause: `failed_at`
    return {
        **own,
        "status": cause.get("status", Status.FAILED),
        "error": cause.get("error"),
        **({"oom": cause["oom"]} if "oom" in cause else {}),
        **({"lost": cause["lost"]} if "lost" in cause else {}),
        **({"failed_at": _where(cause)} if cause.get("status", Status.FAILED) not in _NOT_FAILURES else {}),
    }


def status_of(run_dir: Path, code: int) -> str:
    """The run's status as this node's records tell it, else as the launcher's exit code does."""
    records = read_records(run_dir)
    if records:
        return explain(records)["status"]
    return {EXIT_OK: Status.COMPLETED, EXIT_INTERRUPTED: Status.INTERRUPTED, EXIT_PREEMPTED: Status.PREEMPTED}.get(
        code, Status.FAILED
    )


def concluded(run_dir: Path, code: int, started: float) -> Summary:
    """The run's final summary once its processes are gone: a SLURM job's node-0 task concluded it
    already (its wall_s is the job's run time, not the queue's); otherwise conclude it now."""
    already_ended = rundir.read_summary(run_dir).get("status") not in (None, Status.RUNNING)
    if already_ended:  # a dedicated serving node ended with the run's status
        summary = rundir.write_summary(run_dir, **vllm_log.summary_keys(_log_text(run_dir)))
        return summary if "wall_s" in summary else rundir.write_summary(run_dir, wall_s=time.time() - started)
    return conclude(run_dir, code, time.time() - started)


def _log_text(run_dir: Path) -> str:
    return (run_dir / rundir.LOG).read_text(errors="replace") if (run_dir / rundir.LOG).exists() else ""


def _last_phase(run_dir: Path, rank: str) -> str:
    """The phase `rank` (rank<N>) last entered: the worker keeps ranks/rank<N>.phase current."""
    return rundir.read_phase(run_dir, int(rank.removeprefix("rank"))) or "unknown (memory.telemetry=false)"


def _silent_ranks(run_dir: Path, records: list[RankRecord]) -> list[dict]:
    """Ranks that ran (their phase file is there) and left no record of their end, with the phase they were last in."""
    recorded = {r.get("rank") for r in records}
    folder = Path(run_dir) / rundir.RANKS
    ran = sorted(int(p.stem.removeprefix("rank")) for p in folder.glob("rank*.phase"))
    return [{"rank": r, "phase": _last_phase(run_dir, f"rank{r}")} for r in ran if r not in recorded]


def conclude(run_dir: Path, code: int, wall_s: float) -> Summary:
    """Write this node's final summary.json from its ranks' records, the launcher's exit code and
    train.log; the driver calls this once, after every process of the node has exited."""
    log_text = _log_text(run_dir)
    engine = vllm_log.summary_keys(log_text)  # what vLLM logged at start-up, whatever happened next
    if engine:
        rundir.write_summary(run_dir, **engine)
    killed = (
        " A process was killed by SIGKILL: the kernel's OOM killer does this when host memory runs out."
        if _KILLED in log_text
        else ""
    )
    records = read_records(run_dir)
    if records:
        ended = explain(records)
        ended.pop("rank", None)
        ended.pop("time", None)
        if killed and ended["status"] == Status.FAILED:  # the survivors saw only the broken connection
            ended["error"] = f"{ended.get('error')}.{killed}"
        if ended["status"] not in _NOT_FAILURES and (silent := _silent_ranks(run_dir, records)):
            ended["silent_ranks"] = silent  # killed with their machine, or cut off: what they were doing
            ended["error"] = (
                f"{ended.get('error')}. No record from "
                + ", ".join(f"rank {r['rank']} (last in phase {r['phase']})" for r in silent)
                + ": killed, or its node lost"
            )
        status = ended.pop("status")
        return write_status(run_dir, status, **dict(ended), wall_s=wall_s)
    if code == EXIT_OK:  # a node without rank 0: the run's summary lives on node 0
        return write_status(run_dir, Status.COMPLETED, wall_s=wall_s, note="rank 0's node holds the run's metrics")
    if code == EXIT_INTERRUPTED:
        return write_status(run_dir, Status.INTERRUPTED, wall_s=wall_s)
    stacks = sorted((run_dir / rundir.STACKS).glob("rank*.txt")) if (run_dir / rundir.STACKS).is_dir() else []
    if stacks:
        return write_status(
            run_dir,
            Status.STALLED,
            wall_s=wall_s,
            error="no training step finished for watchdog.stall_s: "
            + ", ".join(f"{path.stem} in phase {_last_phase(run_dir, path.stem)}" for path in stacks)
            + "; Python stacks of the stuck ranks: "
            + ", ".join(map(str, stacks)),
        )
    timeout = _RENDEZVOUS_TIMEOUT.search(log_text)
    if timeout:
        return write_status(
            run_dir,
            Status.RENDEZVOUS_TIMEOUT,
            wall_s=wall_s,
            error=f"not every node joined within topology.rendezvous_timeout_s ({timeout.group(0)}). Start the same "
            "command on every node with its topology.node_rank, and check topology.master_addr/master_port are "
            "reachable",
        )
    return write_status(
        run_dir,
        Status.FAILED,
        wall_s=wall_s,
        error=f"training processes exited with code {code} without a result; see {run_dir / rundir.LOG}.{killed}",
    )
