"""Trackers as components: a module of this package each, holding everything about its tracker:

    REPORT_TO              transformers' report_to name (GRPOConfig.report_to), and the logger option's name
    PACKAGE                what Python imports (installed with grpo_exp[trackers])
    Tracker(cfg, run_dir)  the run set up on rank 0 before training; .ready() before the first step;
                           .finish(summary, exit_code) adds the run's summary and status after it
    SOURCE, load_runs      (where it reads runs back) `grpo-exp compare <SOURCE>:<...>` lists them

and conf/logger/<name>.yaml, which names it (logger=<name>; logger.also=[...] for several at once). transformers'
callbacks log every step's metrics, memory/* included, from rank 0. The lists below are the package's modules:
adding a tracker is one module here and one YAML.

A user's own tracker needs neither: `logger._target_=my_pkg.MyTracker` names a class with the Tracker protocol
(torchtune's MetricLoggerInterface: log_dict, close), built on rank 0 with the logger's other keys.
"""

import dataclasses
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Protocol

from omegaconf import DictConfig

from grpo_exp import import_failure, locate
from grpo_exp.config.schema import LoggerConfig
from grpo_exp.core import plain
from grpo_exp.trackers.common import summary_metrics


class Tracker(Protocol):
    """A tracker of a user's own (logger._target_). On rank 0 it gets every logging step's metrics as the shipped
    trackers do (memory/<phase>/<stat>_gib per step, loss, reward, ...) with the run's memory peaks so far
    (memory/peak/<role>/<stat>_gib, memory/peak_phase/...), then the summary's numbers (summary/...) at the last
    step, then close()."""

    def log_dict(self, metrics: dict, step: int) -> None: ...

    def close(self) -> None: ...


def not_a_tracker(target: str) -> str | None:
    """Why `target` is not a Tracker class (None when it is)."""
    found = locate(target)
    if not isinstance(found, type):
        return f"'{target}' is not an importable class ({import_failure(target)})"
    lacking = [m for m in ("log_dict", "close") if not callable(getattr(found, m, None))]
    return f"{target} has no {' or '.join(lacking)}" if lacking else None


class Targeted:
    """logger._target_'s tracker as one part of a run's trackers: built with the logger keys the schema does not
    have (what the user gave beside _target_)."""

    OWN = {f.name for f in dataclasses.fields(LoggerConfig)}

    def __init__(self, cfg: DictConfig):
        given = plain.mapping(cfg.logger)
        make = locate(cfg.logger._target_)
        if not callable(make):  # not_a_tracker refused it before launch; a caller that skipped the checks learns here
            raise TypeError(f"logger._target_={cfg.logger._target_!r} is not a class")
        self.tracker: Tracker = make(**{k: v for k, v in given.items() if k not in self.OWN})
        self.step = 0

    def ready(self) -> None:
        pass

    def log(self, metrics: dict, step: int) -> None:
        self.step = step
        self.tracker.log_dict(metrics, step)

    def finish(self, summary: dict, exit_code: int) -> None:
        done = {f"summary/{k}": v for k, v in summary_metrics(summary).items()}
        self.tracker.log_dict({**done, "summary/exit_code": exit_code}, int(summary.get("global_step") or self.step))
        self.tracker.close()


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
    """A run's trackers as one: each is set up, readied and finished in turn; a user's (logger._target_) also gets
    each logging step (the shipped ones get theirs through transformers' report_to callbacks)."""

    def __init__(self, parts: list, targeted: Targeted | None = None):
        self.parts = parts + ([targeted] if targeted else [])
        self.targeted = targeted

    def ready(self) -> None:
        for part in self.parts:
            part.ready()

    def log(self, metrics: dict, step: int) -> None:
        if self.targeted is not None:
            self.targeted.log(metrics, step)

    def finish(self, summary: dict, exit_code: int) -> None:
        for part in self.parts:
            part.finish(summary, exit_code)


def start(cfg: DictConfig, run_dir: Path) -> Trackers:
    targeted = Targeted(cfg) if cfg.logger._target_ is not None else None
    return Trackers([component(name).Tracker(cfg, run_dir) for name in configured(cfg)], targeted)
