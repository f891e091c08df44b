"""launcher=kubernetes: the plan as a TrainJob or a JobSet (manifests.py builds the objects,
admission.py refuses what the cluster would, cluster.py applies and follows them). Nothing runs on
this machine: the pods' data is checked as the plan can, and the manifests are written beside plan.json."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.launching import preflight
from grpo_exp.launching.launchers.kubernetes import admission, cluster, manifests
from grpo_exp.planning.placement import NodePlan, Plan
from grpo_exp.planning.planner import MemoryPlan

PICKS_PORTS_HERE = False  # a pod is a host of its own: this machine's free ports say nothing about it


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    manifests.finalize(cfg, run_dir)  # a pod's addresses and ports are its own: none is looked up here


def check(cfg: DictConfig, plan: Plan, gpus: int, batch_known: bool) -> list[Problem]:
    problems = admission.check(cfg, plan) + preflight.check_data(cfg, plan, batch_known=batch_known)
    return problems + (cluster.check_cluster(cfg) if cfg.action == "run" else [])


def build(cfg: DictConfig, plan: Plan, memory: MemoryPlan) -> tuple[list, list[Problem]]:
    objects, problems = admission.built(cfg, plan, memory)
    if not problems:
        memory.notes += manifests.notes(cfg)
    return objects, problems


def write(run_dir: Path, objects) -> None:
    manifests.write(run_dir, objects)


def detaches(cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
    return False


def run(cfg: DictConfig, run_dir: Path, plan: Plan, node: NodePlan) -> int:
    return cluster.run(cfg, run_dir)
