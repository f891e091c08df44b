"""Launchers as components: a package of this one each (conf/launcher/<name>.yaml names it by `name`), holding
everything about how a run's processes start: its options (config.py: `Config`, CHOICES, RANGES; the schema reads
them, config/launcher_options.py) and launcher.py, a module the driver's job (launching/job.py) calls as a
`Launcher` without knowing which launcher it is; one that can only submit a run (SLURM) is also a `Submitter`.
Adding a launcher is one folder here and one YAML. Each is imported when chosen: a plan's start-up pays for its own.
"""

import importlib
import pkgutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from omegaconf import DictConfig

from grpo_exp import Problem

if TYPE_CHECKING:
    from grpo_exp.core.records import Summary
    from grpo_exp.planning.placement import NodePlan, Plan
    from grpo_exp.planning.planner import MemoryPlan


@runtime_checkable
class Launcher(Protocol):
    """What the driver's job calls, in this order (a launcher's launcher.py module implements it)."""

    PICKS_PORTS_HERE: bool  # a one-node run's `auto` ports are free ones of this machine (not a pod's: its own host)

    def finalize(self, cfg: DictConfig, run_dir: Path | None) -> None:
        """Make the config what its processes read (Kubernetes: a pod's own addresses)."""

    def check(self, cfg: DictConfig, plan: "Plan", gpus: int, batch_known: bool) -> list[Problem]:
        """What it needs before anything is written: this machine's preflight, a cluster's manifests and its API."""

    def build(self, cfg: DictConfig, plan: "Plan", memory: "MemoryPlan") -> tuple[Any, list[Problem]]:
        """What it writes beside plan.json (manifests), checked before any is written; it may add notes to `memory`."""

    def write(self, run_dir: Path, files: Any) -> None:
        """Write what build() made."""

    def detaches(self, cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
        """Whether launching only submits the run (a Submitter's submit) and the driver goes on."""

    def run(self, cfg: DictConfig, run_dir: Path, plan: "Plan", node: "NodePlan") -> int:
        """Launch this node's share and wait for its end: the exit code."""


@runtime_checkable
class Submitter(Launcher, Protocol):
    """A launcher that can submit a run without waiting for it (a sweep's independent trials)."""

    def submit(self, cfg: DictConfig, run_dir: Path, plan: "Plan") -> tuple[int, "Summary"]:
        """Submit the run: (exit code, summary) of the submission."""

    def gather(self) -> None:
        """Wait for the runs it submitted without waiting: each one's result is in its run dir when this returns."""


if TYPE_CHECKING:  # mypy holds each shipped launcher to its protocol (at run time each is imported when chosen)
    from grpo_exp.launching.launchers.kubernetes import launcher as _kubernetes
    from grpo_exp.launching.launchers.local import launcher as _local
    from grpo_exp.launching.launchers.slurm import launcher as _slurm

    _SHIPPED: tuple[Launcher, ...] = (_local, _kubernetes)
    _SUBMITTERS: tuple[Submitter, ...] = (_slurm,)


def names() -> list[str]:
    """Every launcher, by the name conf/launcher/<name>.yaml gives it."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


def of(cfg: DictConfig) -> Launcher:
    """The launcher component cfg.launcher.name names (check() has refused a name none has)."""
    return cast(Launcher, importlib.import_module(f"{__name__}.{cfg.launcher.name}.launcher"))


def check(cfg: DictConfig) -> list[Problem]:
    """launcher.name names a package of this one."""
    if cfg.launcher.name in names():
        return []
    why = f"'{cfg.launcher.name}' is not a launcher grpo_exp has (a package of grpo_exp/launching/launchers/)"
    return [Problem("launcher.name", why, f"use one of: {', '.join(names())}")]


def gather() -> None:
    """Wait for what the launchers this process used left running (a parallel SLURM sweep's trials): each one's
    result is in its run dir when this returns. A launcher this process never chose left nothing."""
    for name in names():
        launcher = sys.modules.get(f"{__name__}.{name}.launcher")
        if isinstance(launcher, Submitter):
            launcher.gather()
