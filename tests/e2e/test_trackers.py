"""Trackers beside W&B, against the real thing: the session's one-process run logs to W&B (offline), a real
MLflow tracking server on loopback (SQLite store) and TensorBoard at once; MLflow's client and TensorBoard's own
event reader read back what the run's metrics.jsonl and summary.json hold, and compare reads the MLflow
experiment as it reads run dirs."""

import os

import pytest

from grpo_exp.core import metrics, rundir
from tests.conftest import MLFLOW_EXPERIMENT

pytestmark = pytest.mark.e2e


@pytest.fixture
def trackers_run(one_rank_run, mlflow_server):
    if mlflow_server is None:
        pytest.skip("mlflow and tensorboard are not installed (pip install -e '.[dev]' has them)")
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir, mlflow_server


def test_mlflow_holds_every_step_and_the_summary(trackers_run):
    from mlflow.tracking import MlflowClient

    run_dir, server = trackers_run
    summary, steps = rundir.read_summary(run_dir), rundir.read_metrics(run_dir)
    client = MlflowClient(server)
    [run] = client.search_runs([client.get_experiment_by_name(MLFLOW_EXPERIMENT).experiment_id])
    assert run.info.run_name == run_dir.name and run.data.tags["status"] == "completed"
    assert run.data.tags["model"] == "tiny" and "trainer.max_steps=2" in run.data.tags["overrides"]
    for phase in ("generate", "train", "optimizer"):
        key = metrics.memory(phase, "host_rss_max")
        logged = [m.value for m in client.get_metric_history(run.info.run_id, key)]
        assert logged == pytest.approx([s[key] for s in steps])  # rank 0's aggregation, as metrics.jsonl has it
    for name in (metrics.plan_peak("train"), metrics.plan_peak("host"), metrics.peak("train", metrics.NODE_RSS)):
        assert run.data.metrics[name] == pytest.approx(summary[name])  # the summary, added at the run's end


def test_tensorboard_events_hold_every_step_and_the_summary(trackers_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = trackers_run
    summary, steps = rundir.read_summary(run_dir), rundir.read_metrics(run_dir)
    scalars = {}
    for path in (run_dir / "tensorboard").rglob("events.out.tfevents.*"):
        reader = EventAccumulator(str(path))
        reader.Reload()
        scalars.update({tag: [e.value for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]})
    key = metrics.memory("train", "host_rss_max")
    assert scalars[f"train/{key}"] == pytest.approx([s[key] for s in steps])
    assert scalars[f"summary/{metrics.plan_peak('train')}"] == pytest.approx([summary[metrics.plan_peak("train")]])


def test_trackios_local_store_holds_every_step_and_the_summary(one_rank_run, trackio_dir):
    """Read back by trackio's own storage API, in a process of its own (trackio fixes TRACKIO_DIR at import)."""
    import json
    import subprocess
    import sys

    if trackio_dir is None:
        pytest.skip("trackio is not installed (pip install -e '.[dev]' has it)")
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stdout[-3000:]
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage; "
        "print(json.dumps(SQLiteStorage.get_logs('grpo_exp', sys.argv[1])))"
    )
    read = subprocess.run(
        [sys.executable, "-c", code, run_dir.name],
        capture_output=True,
        text=True,
        env={**os.environ, "TRACKIO_DIR": str(trackio_dir)},
    )
    logs = json.loads(read.stdout)
    key = f"train/{metrics.memory('train', 'host_rss_max')}"
    steps = rundir.read_metrics(run_dir)
    assert [row[key] for row in logs if key in row] == pytest.approx([s[key[len("train/") :]] for s in steps])
    summary = rundir.read_summary(run_dir)
    assert [row[metrics.plan_peak("train")] for row in logs if metrics.plan_peak("train") in row] == pytest.approx(
        [summary[metrics.plan_peak("train")]]
    )


def test_compare_reads_an_mlflow_experiment_as_it_reads_the_run_dir(trackers_run, monkeypatch):
    from grpo_exp.results import compare

    run_dir, server = trackers_run
    monkeypatch.setitem(os.environ, "MLFLOW_TRACKING_URI", server)
    [remote] = compare.rows(compare.load([f"mlflow:{MLFLOW_EXPERIMENT}"]))
    [local] = compare.rows(compare.load([str(run_dir)]))
    shown = ("run", "status", "peak GiB", "plan GiB", "tokens/s")
    assert {k: remote[k] for k in shown} == pytest.approx({k: local[k] for k in shown})
    with pytest.raises(ValueError, match="no MLflow experiment 'nope'"):
        compare.load(["mlflow:nope"])
