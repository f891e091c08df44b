"""The kernel's OOM killer as a cause. When a node's RAM runs out it ends the largest process with SIGKILL: no
Python error, no record of its own, and the surviving ranks see only a broken connection. A node that lost a
training process to SIGKILL while the kernel's OOM-kill counter (/proc/vmstat `oom_kill`, every OOM kill on the
machine, cgroup limits included) rose, records that rank as `oom` (kind host, killed_by the OOM killer, the
node, the phase it was in: the worker keeps ranks/rank<N>.phase current), which outcome.conclude() then reads
as the run's cause. A SIGKILL without the counter rising stays a failure (someone or something else sent it).
"""

import re
import time
from pathlib import Path

from grpo_exp.core import rundir
from grpo_exp.core.records import Status

VMSTAT = Path("/proc/vmstat")
# torchrun's failure report, one block per failed rank: "rank      : 1 (local_rank: 1)" then
# "exitcode  : -9 (pid: 1234)"
_KILLED_RANK = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*-9\b")
SIGKILL_CODE = -9  # Popen's returncode of a process SIGKILL ended


def kills() -> int | None:
    """The machine's OOM kills so far, or None where the kernel does not say (not Linux)."""
    try:
        found = re.search(r"^oom_kill (\d+)$", VMSTAT.read_text(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def killed_ranks(log_text: str, code: int, single_rank: int | None) -> list[int]:
    """Global ranks SIGKILL ended: from torchrun's failure report, or the one rank started without torchrun."""
    if single_rank is not None:
        return [single_rank] if code == SIGKILL_CODE else []
    return sorted({int(r) for r in _KILLED_RANK.findall(log_text)})


def record(run_dir: Path, node: int, ranks: list[int], kills_before: int | None) -> list[int]:
    """Record each of `ranks` as killed by the OOM killer where the counter rose since `kills_before` and the rank
    left no record of its own; returns the ranks recorded."""
    now = kills()
    if not ranks or kills_before is None or now is None or now <= kills_before:
        return []
    folder = Path(run_dir) / rundir.RANKS
    recorded = []
    for rank in ranks:
        if (folder / f"rank{rank}.json").exists():
            continue
        phase = rundir.read_phase(run_dir, rank)
        rundir.write_rank_record(
            run_dir,
            rank,
            {
                "rank": rank,
                "status": Status.OOM,
                "time": time.time(),
                "error": f"rank {rank} on node {node} was killed by the kernel's OOM killer (SIGKILL) in phase "
                f"{phase or 'start-up'}: the node ran out of host RAM (action=plan shows host RAM per node)",
                "oom": {
                    "phase": phase,
                    "rank": rank,
                    "node": node,
                    "kind": "host",
                    "killed_by": "oom_killer",
                    "requested_bytes": None,
                    "oom_kills": now - kills_before,
                },
            },
        )
        recorded.append(rank)
    return recorded
