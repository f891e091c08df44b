"""How a run ended (grpo_exp/core/outcome.py): rank records in, one final status out, written by the
driver alone. The e2e tests cover the same paths with real processes; these cover every branch fast."""

import json
import time

import pytest

from grpo_exp.core import outcome, rundir


def _record(run_dir, rank, status, when, **fields):
    rundir.write_rank_record(
        run_dir, rank, {"status": status, "time": when, "error": f"{status} on rank {rank}", **fields}
    )


def test_rank0_measurements_with_the_root_cause_of_a_peer(tmp_path):
    """An OOM on rank 1 explains the run over rank 0's broken-connection failure, and rank 0's
    measurements stay in the summary."""
    _record(tmp_path, 0, "failed", 2.0, **{"memory/peak/train_gib": 1.5})
    _record(tmp_path, 1, "oom", 3.0, oom={"phase": "train", "rank": 1})
    summary = outcome.conclude(tmp_path, 1, wall_s=9.0)
    assert summary["status"] == "oom" and summary["exit_code"] == outcome.EXIT_OOM
    assert summary["oom"]["rank"] == 1 and summary["error"] == "oom on rank 1"
    assert summary["memory/peak/train_gib"] == 1.5 and summary["wall_s"] == 9.0
    assert "rank" not in summary and "time" not in summary


def test_earliest_failure_explains_the_run_and_completed_ranks_explain_nothing(tmp_path):
    _record(tmp_path, 0, "completed", 1.0)
    _record(tmp_path, 2, "failed", 5.0)
    _record(tmp_path, 1, "failed", 4.0)
    assert outcome.conclude(tmp_path, 1, wall_s=1.0)["error"] == "failed on rank 1"


def test_preempted_rank0_is_the_runs_status(tmp_path):
    _record(tmp_path, 0, "preempted", 1.0, global_step=3)
    summary = outcome.conclude(tmp_path, outcome.EXIT_PREEMPTED, wall_s=1.0)
    assert (summary["status"], summary["exit_code"], summary["global_step"]) == ("preempted", 75, 3)


def test_sigkill_in_the_log_is_named_when_the_survivors_only_saw_a_broken_connection(tmp_path):
    _record(tmp_path, 0, "failed", 1.0)
    (tmp_path / rundir.LOG).write_text("... failed (exitcode: -9) Signal 9 (SIGKILL) received by PID 123\n")
    assert "OOM killer" in outcome.conclude(tmp_path, 1, wall_s=1.0)["error"]


@pytest.mark.parametrize(
    "code, log, stacks, status",
    [
        (0, "", False, "completed"),  # a node without rank 0
        (130, "", False, "interrupted"),
        (1, "", True, "stalled"),
        (1, "torch.distributed.DistNetworkError: timed out", False, "rendezvous_timeout"),
        (1, "Traceback ...", False, "failed"),
    ],
)
def test_without_records_the_exit_code_and_the_log_explain_the_run(tmp_path, code, log, stacks, status):
    (tmp_path / rundir.LOG).write_text(log)
    if stacks:
        (tmp_path / rundir.STACKS).mkdir()
        (tmp_path / rundir.STACKS / "rank1.txt").write_text("Thread ...")
    summary = outcome.conclude(tmp_path, code, wall_s=1.0)
    assert summary["status"] == status and summary["exit_code"] == outcome.EXIT_CODES[status]
    assert json.loads((tmp_path / rundir.SUMMARY).read_text())["status"] == status


def test_a_resumed_attempt_starts_without_the_last_attempts_records(tmp_path):
    _record(tmp_path, 1, "failed", 1.0)
    rundir.clear_rank_records(tmp_path)
    _record(tmp_path, 0, "completed", 2.0)
    assert outcome.conclude(tmp_path, 0, wall_s=1.0)["status"] == "completed"


def test_classify_names_oom_mismatch_interrupt_and_failure():
    from grpo_exp.core.outcome import Mismatch

    assert outcome.classify(MemoryError("no"), 0)["status"] == "oom"
    assert outcome.classify(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), 3)["oom"] == {
        "phase": None,
        "rank": 3,
        "kind": "cuda",
        "requested_bytes": 2 * 2**30,
        "snapshot": None,
    }
    assert outcome.classify(Mismatch("nodes differ"), 0)["status"] == "mismatch"
    assert outcome.classify(KeyboardInterrupt(), 0) | {"time": 0} == {"status": "interrupted", "error": None, "time": 0}
    failed = outcome.classify(ValueError("bad"), 0)
    assert failed["status"] == "failed" and failed["error"] == "ValueError: bad" and failed["time"] <= time.time()


def test_status_of_prefers_the_records_to_the_exit_code(tmp_path):
    assert outcome.status_of(tmp_path, 0) == "completed"
    assert outcome.status_of(tmp_path, 75) == "preempted"
    _record(tmp_path, 1, "oom", 1.0)
    assert outcome.status_of(tmp_path, 0) == "oom"


@pytest.mark.parametrize(
    "exc,kind,requested",
    [
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes."),
            "host",
            8589934592,
        ),
        (MemoryError(), "host", None),
        (
            "torch.OutOfMemoryError",  # built in the test: importing torch here costs every xdist worker ~3 s
            "cuda",
            int(1.42 * 2**30),
        ),
    ],
)
def test_oom_details(exc, kind, requested):
    if exc == "torch.OutOfMemoryError":
        import torch

        exc = torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 has a total capacity of 79.35 GiB"
        )
    assert outcome.oom_details(exc) == {"kind": kind, "requested_bytes": requested}


def test_other_errors_are_not_oom():
    assert outcome.oom_details(RuntimeError("Connection closed by peer")) is None


# The functions that write summary.json's keys (outcome.py's, over rundir.write_summary).
SUMMARY_WRITERS = {"note", "started", "refused", "launch_failed", "write_status", "write_summary", "record_resume"}


def test_every_key_written_to_the_summary_is_a_field_of_summary():
    """Each key a module gives summary.json's writers by name is typed in records.Summary (or RankRecord, which it
    extends): the record a reader gets is the one the type says. (Keys built at run time, memory/peak/* and the
    like, are metric names: core/metrics.py owns them.)"""
    import ast
    import typing
    from pathlib import Path

    from grpo_exp.core.records import Summary

    typed = set(typing.get_type_hints(Summary))
    written = {}
    for path in Path(outcome.__file__).parents[1].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            inside = owner is None and path.name in ("outcome.py", "rundir.py")
            if name in SUMMARY_WRITERS and (owner in ("outcome", "rundir") or inside):
                written |= {kw.arg: f"{path.name}:{node.lineno}" for kw in node.keywords if kw.arg}
    assert len(written) > 20, written  # the scan finds the writers' calls
    assert {k: v for k, v in written.items() if k not in typed} == {}
