"""Trackers as components: a module of this package each, holding everything about its tracker:

    REPORT_TO              transformers' report_to name (GRPOConfig.report_to), and the logger option's name
    PACKAGE                what Python imports (installed with grpo_exp[trackers])
    Tracker(cfg, run_dir)  the run set up on rank 0 before training; .ready() before the first step;
                           .finish(summary, exit_code) adds the run's summary and status after it
    SOURCE, load_runs      (where it reads runs back) `grpo-exp compare <SOURCE>:<...>` lists them

and conf/logger/<name>.yaml, which names it (logger=<name>; logger.also=[...] for several at once). transformers'
callbacks log every step's metrics, memory/* included, from rank 0. The lists below are the package's modules:
adding a tracker is one module here and one YAML.
"""

import importlib
import importlib.util
import pkgutil
from pathlib import Path
from types import ModuleType

from omegaconf import DictConfig

_SHARED = ("common",)  # what every tracker writes of a run: not a tracker


def names() -> list[str]:
    """Every tracker grpo_exp runs, by report_to name."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _SHARED)


def component(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def components() -> list[ModuleType]:
    return [component(name) for name in names()]


def installed() -> list[str]:
    """The trackers whose package is installed here (what transformers' report_to="all" means)."""
    return [c.REPORT_TO for c in components() if importlib.util.find_spec(c.PACKAGE) is not None]


def configured(cfg: DictConfig) -> list[str]:
    """The trackers of a run, by report_to name: logger.name, then logger.also."""
    return [t for t in (cfg.logger.name, *cfg.logger.also) if t != "none"]


class Trackers:
    """A run's trackers as one: each is set up, readied and finished in turn."""

    def __init__(self, parts: list):
        self.parts = parts

    def ready(self) -> None:
        for part in self.parts:
            part.ready()

    def finish(self, summary: dict, exit_code: int) -> None:
        for part in self.parts:
            part.finish(summary, exit_code)


def start(cfg: DictConfig, run_dir: Path) -> Trackers:
    return Trackers([component(name).Tracker(cfg, run_dir) for name in configured(cfg)])
