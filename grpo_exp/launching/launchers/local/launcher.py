"""launcher=local: this node's share of the plan started here (python, or torchrun for several processes), as the
multi-node docs' commands start every node."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.launching import launch, preflight, reachability
from grpo_exp.planning.placement import NodePlan, Plan
from grpo_exp.planning.planner import MemoryPlan

PICKS_PORTS_HERE = True  # a one-node run's `auto` ports: free ones of this machine, where it runs


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    pass


def check(cfg: DictConfig, plan: Plan, gpus: int, batch_known: bool) -> list[Problem]:
    """action=run: all of this machine's preflight (data, libraries, ports, versions), the serving node's address
    and what this node must reach of the others; action=plan: the data here."""
    if cfg.action != "run":
        return preflight.check_data(cfg, plan, batch_known=batch_known)
    server_node = plan.vllm.get("server_node")
    return (
        preflight.check(cfg, plan, gpus, batch_known=batch_known)
        + _serving_node_named(cfg)
        + reachability.check(cfg, cfg.topology.node_rank, server_node)
    )


def _serving_node_named(cfg: DictConfig) -> list[Problem]:
    """Every node is started by hand: none can learn where the serving node listens unless told."""
    if not cfg.vllm.nodes or cfg.vllm.server_host is not None:
        return []
    why = (
        "is required with vllm.nodes=1 and launcher=local: the trainers reach the serving node (node "
        f"{cfg.topology.nnodes - 1}) there, and it listens there"
    )
    fix = (
        "set vllm.server_host=<the serving node's address> on every node (launcher=slurm fills it in from the "
        "job's hosts)"
    )
    return [Problem("vllm.server_host", why, fix)]


def build(cfg: DictConfig, plan: Plan, memory: MemoryPlan) -> tuple[None, list[Problem]]:
    return None, []


def write(run_dir: Path, files) -> None:
    pass


def detaches(cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
    return False


def run(cfg: DictConfig, run_dir: Path, plan: Plan, node: NodePlan) -> int:
    return launch.run_node(cfg, run_dir, node)
