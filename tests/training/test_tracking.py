"""W&B's run, started beside the trainer build."""

import pytest

from tests.helpers import compose_cfg


def test_wandb_starts_beside_the_trainer_build_and_its_failure_reaches_the_worker(tmp_path, monkeypatch):
    """tracking.start returns at once (wandb.init runs in a thread); ready() joins it and raises what
    init raised, in the worker's thread; finish() after a failed init has nothing to finish."""
    import threading

    import wandb

    from grpo_exp import trackers as tracking

    release = threading.Event()

    def init(**kwargs):
        release.wait(timeout=10)
        raise RuntimeError(f"no W&B for {kwargs['id']}")

    monkeypatch.setattr(wandb, "init", init)
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("[]\n")
    [tracker] = tracking.start(compose_cfg("logger.mode=offline"), tmp_path).parts
    assert tracker.run is None  # not waited for: init is still blocked
    release.set()
    with pytest.raises(RuntimeError, match="no W&B for"):
        tracker.ready()
    tracker.finish({"status": "failed"}, 1)


def test_trackers_are_the_logger_and_its_companions_and_each_is_checked():
    from grpo_exp.trackers import configured as trackers
    from tests.helpers import problem_keys, problems

    assert trackers(compose_cfg("logger=mlflow", "logger.also=[tensorboard,wandb]")) == [
        "mlflow",
        "tensorboard",
        "wandb",
    ]
    assert trackers(compose_cfg("logger=none")) == []
    assert problem_keys(problems("logger=mlflow", "logger.also=[comet_ml]")) == ["logger.also"]
    assert problem_keys(problems("logger=mlflow", "logger.also=[mlflow]")) == ["logger.also"]
    assert problem_keys(problems("logger=mlflow", "logger.name=neptune")) == ["logger.name"]


@pytest.mark.slow  # SwanLab's import and two runs: ~2 s of make test-fast's budget
def test_a_swanlab_run_that_failed_and_resumed_is_one_run_ending_as_the_last_attempt(tmp_path):
    """SwanLab offline in the run dir: the failed attempt ends CRASHED with its status; the resumed one continues
    the same SwanLab run (the id kept in the run dir, a folder per attempt), and compare reads them as one run."""
    pytest.importorskip("swanlab", reason="swanlab is not installed (pip install -e '.[dev]' has it)")
    from swanlab.proto.swanlab.run.v1.run_pb2 import RunState

    from grpo_exp import trackers as tracking
    from grpo_exp.results import compare
    from tests.helpers import swanlab_records

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("['trainer.num_generations=4']\n")
    cfg = compose_cfg("logger=swanlab", "logger.mode=offline", "trainer.num_generations=4")
    for status, code in (("oom", 4), ("completed", 0)):
        [tracker] = tracking.start(cfg, tmp_path).parts
        tracker.ready()
        tracker.finish({"status": status, "global_step": 1, "plan/train/peak_gib": 1.5}, code)
    first, second = sorted((tmp_path / "swanlog").glob("run-*"))
    assert first.name.split("-")[-1] == second.name.split("-")[-1] == (tmp_path / "swanlab_id").read_text().strip()
    states = [
        [r.finish.state for r in swanlab_records(d) if r.WhichOneof("record_type") == "finish"] for d in (first, second)
    ]
    assert states == [[RunState.RUN_STATE_CRASHED], [RunState.RUN_STATE_FINISHED]]
    [run] = compare.load([f"swanlab:{tmp_path}"])
    assert (run.name, run.status, run.overrides) == (tmp_path.name, "completed", {"trainer.num_generations": "4"})
    assert run.summary["plan/train/peak_gib"] == 1.5
