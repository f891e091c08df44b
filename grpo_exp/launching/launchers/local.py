"""launcher=local: this node's share of the plan started here (python, or torchrun for several processes), as the
multi-node docs' commands start every node."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.launching import launch, preflight
from grpo_exp.planning.placement import NodePlan, Plan


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    pass


def check(cfg: DictConfig, plan: Plan, gpus: int, batch_known: bool) -> list[Problem]:
    """action=run: all of this machine's preflight (data, libraries, ports, versions); action=plan: the data here."""
    if cfg.action == "run":
        return preflight.check(cfg, plan, gpus, batch_known=batch_known)
    return preflight.check_data(cfg, plan, batch_known=batch_known)


def build(cfg: DictConfig, plan: Plan, memory: dict) -> tuple[None, list[Problem]]:
    return None, []


def write(run_dir: Path, files) -> None:
    pass


def detaches(cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
    return False


def run(cfg: DictConfig, run_dir: Path, plan: Plan, node: NodePlan) -> int:
    return launch.run_node(cfg, run_dir, node)
