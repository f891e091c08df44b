"""W&B's run, started beside the trainer build."""

import pytest

from tests.helpers import compose_cfg


def test_wandb_starts_beside_the_trainer_build_and_its_failure_reaches_the_worker(tmp_path, monkeypatch):
    """tracking.start returns at once (wandb.init runs in a thread); ready() joins it and raises what
    init raised, in the worker's thread; finish() after a failed init has nothing to finish."""
    import threading

    import wandb

    from grpo_exp.training import tracking

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
    from grpo_exp.config.checks import trackers
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
