"""The run dir's files: written as they are read, nothing half written."""

import math

import pytest

from grpo_exp.core import outcome, rundir


def test_metrics_writer_flushes_each_line_and_drops_nan(tmp_path):
    writer = rundir.MetricsWriter(tmp_path)
    writer.write(1, {"loss": 0.5, "reward": math.nan})
    assert rundir.read_metrics(tmp_path) == [{"step": 1, "loss": 0.5, "reward": None}]  # before close
    writer.close()


def test_summary_merges_and_the_status_brings_its_exit_code(tmp_path):
    outcome.write_status(tmp_path, "running", world_size=2)
    assert rundir.read_summary(tmp_path) == {"status": "running", "exit_code": None, "world_size": 2}
    summary = outcome.write_status(tmp_path, "failed", error="boom")
    assert summary == {
        "status": "failed",
        "exit_code": 1,
        "world_size": 2,
        "error": "boom",
        "ended_at": summary["ended_at"],
    }
    assert rundir.read_summary(tmp_path) == summary
    with pytest.raises(KeyError):  # a status without an exit code is a bug, not exit code 1
        outcome.write_status(tmp_path, "finished")
