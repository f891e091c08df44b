"""Experiment tracking: W&B, MLflow, TensorBoard, trackio, SwanLab (logger.name, and logger.also for several at
once), each with the same calls (`start`, `ready`, `finish`). transformers' callbacks (GRPOConfig.report_to)
log every step's metrics, memory/* included, from rank 0; a tracker here sets each run up before training and
adds the run's summary (plan/*, time/*, memory/peak/*, the status) after it.

The W&B run is created here, on rank 0, before training: transformers' WandbCallback then logs
into this run instead of creating its own, so the run carries our config, tags and group.
`wandb.init` mostly waits (its service process starting, the run being set up: ~1 s of a short
run's start on 2 cores), so it runs in a thread while the worker builds the trainer; `ready()`
joins it before training starts. SwanLab's run is created here too, for the same reason (group, tags, config).
MLflow, TensorBoard and SwanLab are told where to write by their own environment variables (set only where the
user has not): credentials and URIs never enter the run dir.
"""

import netrc
import os
import secrets
import threading
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp.config.checks import trackers
from grpo_exp.config.overrides import values
from grpo_exp.core import rundir
from grpo_exp.core.status import Status


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def wandb_mode(cfg: DictConfig) -> str:
    if cfg.logger.mode != "auto":
        return cfg.logger.mode
    return "online" if has_wandb_credentials() else "offline"


def run_tags(cfg: DictConfig) -> list[str]:
    ds = cfg.deepspeed.get("zero_optimization", {}).get("stage") if cfg.deepspeed else None
    derived = [
        f"model:{cfg.model.name}",
        f"topology:{cfg.topology.name}",
        f"deepspeed:{'zero' + str(ds) if ds is not None else 'none'}",
        f"vllm:{cfg.vllm.mode}",
    ] + ([f"fsdp:{cfg.fsdp.name}"] if cfg.fsdp.enabled else [])
    return derived + list(cfg.logger.tags)


def swept_values(overrides: list[str]) -> dict:
    """`key=value` overrides (not hydra.* ones) as {key: value}, values parsed as YAML scalars."""
    import yaml

    return {key: yaml.safe_load(value) for key, value in values(overrides).items()}


def run_group(cfg: DictConfig, run_dir: Path) -> str:
    """logger.group; else runs of one sweep share a group, experiment/<sweep dir name>; a single run: the
    experiment. W&B's and SwanLab's group, MLflow's experiment, trackio's group."""
    if cfg.logger.group:
        return cfg.logger.group
    multirun = run_dir.parent / "multirun.yaml"
    return f"{cfg.experiment}/{run_dir.parent.name}" if multirun.exists() else cfg.experiment


def run_name(cfg: DictConfig, run_dir: Path) -> str:
    """What every tracker calls the run: run_name, else the run dir's name."""
    return cfg.run_name or run_dir.name


def run_config(cfg: DictConfig, run_dir: Path) -> dict:
    """What a tracker keeps as the run's config: the resolved config, the command line's overrides, and those
    values as top-level keys ("trainer.num_generations": 8) that a tracker's parallel coordinates and scatter
    panels plot directly across the runs of a sweep."""
    overrides = rundir.read_overrides(run_dir)
    config = OmegaConf.to_container(cfg, resolve=True)
    config["overrides"] = overrides
    config.update(swept_values(overrides))
    return config


def kept_run_id(id_file: Path) -> str:
    """One tracker run per grpo_exp run: a resumed (or requeued) run continues the tracker's run whose id the
    first start kept in the run dir."""
    run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)  # W&B, SwanLab: [a-z0-9]+
    id_file.write_text(run_id + "\n")
    return run_id


class WandbTracker:
    def __init__(self, cfg: DictConfig, run_dir: Path):
        import wandb

        init = dict(
            id=kept_run_id(run_dir / rundir.WANDB_ID),
            resume="allow",
            project=cfg.logger.project,
            entity=cfg.logger.entity,
            group=run_group(cfg, run_dir),
            name=run_name(cfg, run_dir),
            dir=str(run_dir),
            mode=wandb_mode(cfg),
            config=run_config(cfg, run_dir),
            tags=run_tags(cfg),
        )
        self.run, self._error = None, None
        self._thread = threading.Thread(target=self._init, args=(wandb, init), name="wandb-init", daemon=True)
        self._thread.start()

    def _init(self, wandb, init: dict) -> None:
        try:
            self.run = wandb.init(**init)
        except BaseException as exc:  # raised again by ready(), in the worker's own thread
            self._error = exc

    def ready(self) -> None:
        """The W&B run exists (WandbCallback logs into it from the first step on)."""
        self._thread.join()
        if self._error is not None:
            raise self._error

    def finish(self, summary: dict, exit_code: int) -> None:
        self._thread.join()
        if self.run is None:  # wandb.init failed: the run's record says why (ready() raised it)
            return
        self.run.summary.update(summary)
        self.run.finish(exit_code=exit_code)


def _summary_metrics(summary: dict) -> dict[str, float]:
    """The run summary's numbers (plan/*, time/*, memory/peak/*, ...) and the planner's errors like with like
    (plan_error/train/*): what a tracker keeps beside the steps."""
    numbers = {k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**numbers, **rundir.plan_errors(summary)}


class MlflowTracker:
    """MLflow through transformers' MLflowCallback: the server (MLFLOW_TRACKING_URI, unset: an SQLite store in
    the run dir), the experiment (MLFLOW_EXPERIMENT_NAME, unset: the run's group), our tags and the swept values
    (MLFLOW_TAGS, read back by `grpo-exp compare mlflow:<experiment>`). finish() adds the summary to that run."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        import json

        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # the URI stays out of train.log
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", run_group(cfg, run_dir))
        tags = dict(tag.split(":", 1) for tag in run_tags(cfg) if ":" in tag)
        tags["overrides"] = json.dumps(rundir.read_overrides(run_dir))
        os.environ.setdefault("MLFLOW_TAGS", json.dumps(tags))

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        import time

        import mlflow
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        run = mlflow.last_active_run()  # the one MLflowCallback started in this process
        if run is None:  # training never started: nothing was logged
            return
        step = int(summary.get("global_step") or 0)
        now = int(time.time() * 1000)
        client = MlflowClient()
        found = [Metric(k, v, now, step) for k, v in _summary_metrics(summary).items()]
        for start in range(0, len(found), 1000):  # MLflow's batch limit
            client.log_batch(run.info.run_id, metrics=found[start : start + 1000])
        client.set_tag(run.info.run_id, "status", summary.get("status", "unknown"))


class TensorBoardTracker:
    """TensorBoard through transformers' TensorBoardCallback: event files in <run dir>/tensorboard
    (TENSORBOARD_LOGGING_DIR overrides); finish() writes the summary there at the last step."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run_dir / "tensorboard"))

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=os.environ["TENSORBOARD_LOGGING_DIR"])
        step = int(summary.get("global_step") or 0)
        for key, value in _summary_metrics(summary).items():
            writer.add_scalar(f"summary/{key}", value, step)
        writer.close()


class TrackioTracker:
    """trackio (local-first: an SQLite store under TRACKIO_DIR, its own default ~/.cache/huggingface/trackio)
    through transformers' TrackioCallback, in project logger.project. The callback gives its run neither a group
    nor our config, and trackio keeps a run's latest config: finish() adds the group, the config (the overrides,
    swept values and tags, over what the callback kept) with the status, and logs the summary as one more step."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.project, self.name = cfg.logger.project, run_name(cfg, run_dir)
        self.group = run_group(cfg, run_dir)
        self.config = {**run_config(cfg, run_dir), "tags": run_tags(cfg)}

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        import trackio
        from trackio.sqlite_storage import SQLiteStorage

        kept = {k: v for k, v in (SQLiteStorage.get_run_config(self.project, self.name) or {}).items() if k[0] != "_"}
        config = {**kept, **self.config, "status": summary.get("status", "unknown")}
        trackio.init(project=self.project, name=self.name, group=self.group, config=config, resume="must")
        trackio.log({**_summary_metrics(summary), "status_code": float(exit_code)})
        trackio.finish()


class SwanLabTracker:
    """SwanLab (what ms-swift's users log to) through transformers' SwanLabCallback, which logs into the run
    created here: project logger.project (SWANLAB_PROJECT overrides), the run's name, group and tags, the config.
    Mode: SWANLAB_MODE, else logger.mode, auto being online with SwanLab's credentials (SWANLAB_API_KEY or its
    login) and offline without: the run is written under <run dir>/swanlog (SWANLAB_LOG_DIR overrides) for
    `swanlab sync`. finish() logs the summary at the last step and ends the run with the status."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        import swanlab

        init = dict(
            project=os.environ.get("SWANLAB_PROJECT") or cfg.logger.project,
            experiment_name=run_name(cfg, run_dir),
            group=run_group(cfg, run_dir),
            tags=run_tags(cfg),
            config=run_config(cfg, run_dir),
            id=kept_run_id(run_dir / rundir.SWANLAB_ID),
            resume="allow",
        )
        if "SWANLAB_LOG_DIR" not in os.environ:
            init["log_dir"] = str(run_dir / "swanlog")
        if "SWANLAB_MODE" not in os.environ:
            mode = cfg.logger.mode
            init["mode"] = ("online" if swanlab.Settings().api_key else "offline") if mode == "auto" else mode
        self.run = swanlab.init(**init)

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        status = summary.get("status", "unknown")
        step = int(summary.get("global_step") or 0)
        self.run.log(_summary_metrics(summary), step=step)
        self.run.config.update({"status": status})  # compare reads it back (config.yaml of the run)
        if status == Status.COMPLETED:
            self.run.finish(state="success")
        elif status == Status.PREEMPTED:  # saved and stopped: it resumes into this run
            self.run.finish(state="aborted")
        else:
            self.run.finish(state="crashed", error=summary.get("error") or status)


class Trackers:
    """Several trackers as one: each is set up, readied and finished in turn."""

    def __init__(self, parts: list):
        self.parts = parts

    def ready(self) -> None:
        for part in self.parts:
            part.ready()

    def finish(self, summary: dict, exit_code: int) -> None:
        for part in self.parts:
            part.finish(summary, exit_code)


TRACKER_CLASSES = {
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
    "tensorboard": TensorBoardTracker,
    "trackio": TrackioTracker,
    "swanlab": SwanLabTracker,
}


def start(cfg: DictConfig, run_dir: Path):
    return Trackers([TRACKER_CLASSES[name](cfg, run_dir) for name in trackers(cfg)])
