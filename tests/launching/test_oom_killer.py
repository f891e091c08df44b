"""The OOM killer as a cause: which ranks SIGKILL ended (torchrun's failure report, or the one rank started
without torchrun), and a record only where the kernel's OOM-kill counter rose and the rank left none."""

from grpo_exp.core import rundir
from grpo_exp.launching import oom_killer

# torchrun's report of a rank SIGKILL ended, as torch 2.13 prints it
TORCHRUN_REPORT = """
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_03:31:02
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 30912)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 30912
Failures:
[1]:
  time      : 2026-11-25_03:31:02
  host      : vm
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 30911)
"""


def test_killed_ranks_come_from_torchruns_report_or_the_lone_processs_exit_code():
    assert oom_killer.killed_ranks(TORCHRUN_REPORT, code=1, single_rank=None) == [1]
    assert oom_killer.killed_ranks("", code=-9, single_rank=0) == [0]
    assert oom_killer.killed_ranks("", code=1, single_rank=0) == []


def test_a_rank_is_recorded_only_when_the_counter_rose_and_it_left_no_record(tmp_path, monkeypatch):
    vmstat = tmp_path / "vmstat"
    monkeypatch.setattr(oom_killer, "VMSTAT", vmstat)
    vmstat.write_text("nr_free_pages 1\noom_kill 7\n")
    assert oom_killer.kills() == 7
    assert oom_killer.record(tmp_path, node=2, ranks=[1], kills_before=7) == []  # someone else's SIGKILL
    rundir.write_rank_record(tmp_path, 3, {"status": "failed", "error": "its own"})
    rundir.phase_path(tmp_path, 1).write_text("train")
    vmstat.write_text("oom_kill 8\n")
    assert oom_killer.record(tmp_path, node=2, ranks=[1, 3], kills_before=7) == [1]
    [killed] = [r for r in (tmp_path / rundir.RANKS).glob("rank1.json")]
    record = rundir.read_json(killed)
    assert record["status"] == "oom" and record["oom"] == {
        "phase": "train",
        "rank": 1,
        "node": 2,
        "kind": "host",
        "killed_by": "oom_killer",
        "requested_bytes": None,
        "oom_kills": 1,
    }
    vmstat.unlink()
    assert oom_killer.kills() is None  # not Linux: no evidence, no record
