"""Trackers beside W&B, against the real thing: the session's one-process run logs to W&B (offline), a real
MLflow tracking server on loopback (SQLite store), TensorBoard, trackio and SwanLab (offline) at once; MLflow's
client, TensorBoard's event reader, trackio's storage and the reader `swanlab sync` uses read back what the run's
metrics.jsonl and summary.json hold, and compare reads the MLflow experiment and SwanLab's runs as it reads run
dirs."""

import os

import pytest

from grpo_exp.core import metrics, rundir
from tests.helpers import MLFLOW_EXPERIMENT, swanlab_records

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


def test_trackios_local_store_holds_the_run_every_step_and_the_summary(one_rank_run, trackio_dir):
    """Read back by trackio's own storage API, in a process of its own (trackio fixes TRACKIO_DIR at import);
    compare reads the project as it reads the run dir."""
    import json
    import subprocess
    import sys

    if trackio_dir is None:
        pytest.skip("trackio is not installed (pip install -e '.[dev]' has it)")
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stdout[-3000:]
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
        "from grpo_exp.results import compare; rows = lambda source: compare.rows(compare.load([source])); "
        "print(json.dumps([S.get_logs('grpo_exp', sys.argv[1]), S.get_run_config('grpo_exp', sys.argv[1]), "
        "rows('trackio:grpo_exp'), rows(sys.argv[2])], default=str))"
    )
    read = subprocess.run(
        [sys.executable, "-c", code, run_dir.name, str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "TRACKIO_DIR": str(trackio_dir)},
    )
    assert read.returncode == 0, read.stderr[-3000:]
    logs, config, [remote], [local] = json.loads(read.stdout)
    key = f"train/{metrics.memory('train', 'host_rss_max')}"
    steps = rundir.read_metrics(run_dir)
    assert [row[key] for row in logs if key in row] == pytest.approx([s[key[len("train/") :]] for s in steps])
    summary = rundir.read_summary(run_dir)
    assert [row[metrics.plan_peak("train")] for row in logs if metrics.plan_peak("train") in row] == pytest.approx(
        [summary[metrics.plan_peak("train")]]
    )
    assert (config["_Group"], config["status"], config["model"]["name"]) == ("default", "completed", "tiny")
    assert "trainer.max_steps=2" in config["overrides"] and "model:tiny" in config["tags"]
    assert "learning_rate" in config  # what TrackioCallback kept (TrainingArguments) stays beside ours
    shown = ("run", "status", "peak GiB", "plan GiB", "tokens/s")
    assert {k: remote[k] for k in shown} == pytest.approx({k: local[k] for k in shown})


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


@pytest.fixture
def swanlab_run(one_rank_run):
    import importlib.util

    if importlib.util.find_spec("swanlab") is None:
        pytest.skip("swanlab is not installed (pip install -e '.[dev]' has it)")
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stdout[-3000:]
    return run_dir


def test_swanlabs_offline_store_holds_the_run_every_step_and_the_summary(swanlab_run):
    from omegaconf import OmegaConf
    from swanlab.proto.swanlab.run.v1.run_pb2 import RunState

    from grpo_exp.trackers import common as tracking
    from tests.helpers import SECRETS

    run_dir = swanlab_run
    records = swanlab_records(run_dir / "swanlog")
    [start] = [r.start for r in records if r.WhichOneof("record_type") == "start"]
    assert (start.project, start.name, start.group) == ("grpo_exp", run_dir.name, "default")
    assert list(start.tags) == tracking.run_tags(OmegaConf.load(run_dir / rundir.CONFIG))
    assert start.id == (run_dir / "swanlab_id").read_text().strip()  # a resumed run continues this one
    scalars = {}
    for record in records:
        if record.WhichOneof("record_type") == "scalar":
            scalars.setdefault(record.scalar.key, {})[record.scalar.step] = record.scalar.value.number
    steps = rundir.read_metrics(run_dir)
    key = metrics.memory("train", "host_rss_max")
    assert scalars[f"train/{key}"] == pytest.approx({s["step"]: s[key] for s in steps})
    summary = rundir.read_summary(run_dir)
    assert scalars[metrics.plan_peak("train")] == pytest.approx(
        {summary["global_step"]: summary[metrics.plan_peak("train")]}
    )
    [finish] = [r.finish for r in records if r.WhichOneof("record_type") == "finish"]
    assert finish.state == RunState.RUN_STATE_FINISHED
    stored = "".join(p.read_text(errors="replace") for p in (run_dir / "swanlog").rglob("*") if p.is_file())
    assert SECRETS["SWANLAB_API_KEY"] not in stored


def test_compare_reads_swanlabs_runs_as_it_reads_the_run_dir(swanlab_run):
    from grpo_exp.results import compare

    [remote] = compare.rows(compare.load([f"swanlab:{swanlab_run}"]))
    [local] = compare.rows(compare.load([str(swanlab_run)]))
    shown = ("run", "status", "peak GiB", "plan GiB", "tokens/s")
    assert {k: remote[k] for k in shown} == pytest.approx({k: local[k] for k in shown})
    with pytest.raises(ValueError, match="no SwanLab runs below"):
        compare.load([f"swanlab:{swanlab_run / 'checkpoints'}"])


def test_a_users_own_tracker_gets_every_step_with_the_memory_peaks_then_the_summary(one_rank_run):
    """logger._target_ (tests/user_tracker.py, built with its own `path` key): every logging step's metrics as
    metrics.jsonl holds them, with the run's memory peaks so far, then the summary's numbers, then close()."""
    import json

    from omegaconf import OmegaConf

    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in open(OmegaConf.load(run_dir / rundir.CONFIG).logger.path)]
    steps, summary = rundir.read_metrics(run_dir), rundir.read_summary(run_dir)
    *logged, last, closed = rows
    assert closed == {"closed": True} and len(logged) == len(steps) == 2
    key, peak = metrics.memory("train", "host_rss_max"), metrics.peak("train", "host_rss_max")
    assert [r[key] for r in logged] == pytest.approx([s[key] for s in steps])

    def so_far(i: int) -> float:  # the train role's peak: every phase but vLLM's, every step up to i
        found = [(metrics.MEMORY.fullmatch(k), v) for s in steps[: i + 1] for k, v in s.items()]
        return max(v for m, v in found if m and m.group(2) == "host_rss_max" and m.group(1) != metrics.VLLM)

    assert [r[peak] for r in logged] == pytest.approx([so_far(0), so_far(1)])
    assert last["step"] == summary["global_step"] and last["summary/exit_code"] == 0
    assert last[f"summary/{metrics.plan_peak('train')}"] == pytest.approx(summary[metrics.plan_peak("train")])
