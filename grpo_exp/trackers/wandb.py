"""Weights & Biases: the run is created here, on rank 0, before training: transformers' WandbCallback then logs into
this run instead of creating its own, so the run carries our config, tags and group. `wandb.init` mostly waits (its
service process starting, the run being set up: ~1 s of a short run's start on 2 cores), so it runs in a thread
while the worker builds the trainer; `ready()` joins it before training starts. `grpo-exp compare
wandb:<entity>/<project>` reads a project's runs back (the network and credentials needed)."""

import netrc
import os
import threading
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.config.overrides import values
from grpo_exp.core.runs import Run
from grpo_exp.trackers.common import kept_run_id, run_config, run_group, run_name, run_tags

REPORT_TO = "wandb"  # transformers' report_to name, and the logger option's
PACKAGE = "wandb"  # what Python imports
SOURCE = "wandb"  # grpo-exp compare wandb:<entity>/<project>
ID_FILE = "wandb_id"  # in the run dir: a resumed run continues the same W&B run


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


class Tracker:
    def __init__(self, cfg: DictConfig, run_dir: Path):
        import wandb

        init = dict(
            id=kept_run_id(run_dir / ID_FILE),
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
        self.run = None
        self._error: BaseException | None = None
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


def load_runs(project: str, group: str | None = None) -> list[Run]:
    """Runs of a W&B project (needs the network and credentials)."""
    import wandb

    runs = wandb.Api().runs(project, filters={"group": group} if group else None)
    out = []
    for r in runs:
        out.append(Run(r.name, values(r.config.get("overrides", [])), dict(r.summary)))
    return out
