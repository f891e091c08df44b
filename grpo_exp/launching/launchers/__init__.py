"""Launchers as components: a module of this package each (conf/launcher/<name>.yaml names it by `name`), holding
everything about how a run's processes start, as the driver's job (launching/job.py) calls it without knowing which:

    finalize(cfg, run_dir)            make the config what its processes read (Kubernetes: a pod's own addresses)
    check(cfg, plan, gpus, batch_known) -> [Problem]   what it needs before anything is written (this machine's
                                                       preflight; a cluster's manifests and its API)
    build(cfg, plan, memory) -> (files, [Problem])     what it writes beside plan.json, checked first (manifests);
                                                       it may add notes to `memory`
    write(run_dir, files)             writes them
    detaches(cfg, sweeping, independent_trials) -> bool   whether launching only submits (the driver goes on)
    submit(cfg, run_dir, plan) -> (exit code, summary)    that submission
    run(cfg, run_dir, plan, node) -> exit code             launch this node's share and wait for its end

Adding a launcher is one module here and one YAML. Each is imported when chosen: a plan's start-up pays for its own.
"""

import importlib
import pkgutil
from types import ModuleType

from omegaconf import DictConfig

from grpo_exp import Problem


def names() -> list[str]:
    """Every launcher, by the name conf/launcher/<name>.yaml gives it."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__))


def of(cfg: DictConfig) -> ModuleType:
    """The launcher component cfg.launcher.name names (check() has refused a name none has)."""
    return importlib.import_module(f"{__name__}.{cfg.launcher.name}")


def check(cfg: DictConfig) -> list[Problem]:
    """launcher.name names a module of this package."""
    if cfg.launcher.name in names():
        return []
    why = f"'{cfg.launcher.name}' is not a launcher grpo_exp has (a module of grpo_exp/launching/launchers/)"
    return [Problem("launcher.name", why, f"use one of: {', '.join(names())}")]
