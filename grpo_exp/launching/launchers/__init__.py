"""Launchers as components: a package of this one each (conf/launcher/<name>.yaml names it by `name`), holding
everything about how a run's processes start: its options (config.py: `Config`, CHOICES, RANGES; the schema reads
them, config/launcher_options.py) and launcher.py, which the driver's job (launching/job.py) calls without knowing
which launcher it is:

    finalize(cfg, run_dir)            make the config what its processes read (Kubernetes: a pod's own addresses)
    check(cfg, plan, gpus, batch_known) -> [Problem]   what it needs before anything is written (this machine's
                                                       preflight; a cluster's manifests and its API)
    build(cfg, plan, memory) -> (files, [Problem])     what it writes beside plan.json, checked first (manifests);
                                                       it may add notes to `memory`
    write(run_dir, files)             writes them
    detaches(cfg, sweeping, independent_trials) -> bool   whether launching only submits (the driver goes on)
    submit(cfg, run_dir, plan) -> (exit code, summary)    that submission
    run(cfg, run_dir, plan, node) -> exit code             launch this node's share and wait for its end
    gather()                          (optional) wait for the runs it submitted without waiting (a sweep's trials)
    PICKS_PORTS_HERE                  whether a one-node run's `auto` ports are free ones of this machine (not on
                                      Kubernetes: a pod is a host of its own)

Adding a launcher is one folder here and one YAML. Each is imported when chosen: a plan's start-up pays for its own.
"""

import importlib
import pkgutil
import sys
from types import ModuleType

from omegaconf import DictConfig

from grpo_exp import Problem


def names() -> list[str]:
    """Every launcher, by the name conf/launcher/<name>.yaml gives it."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)


def of(cfg: DictConfig) -> ModuleType:
    """The launcher component cfg.launcher.name names (check() has refused a name none has)."""
    return importlib.import_module(f"{__name__}.{cfg.launcher.name}.launcher")


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
        if launcher is not None and hasattr(launcher, "gather"):
            launcher.gather()
