"""launcher=kubernetes: the plan as a TrainJob or a JobSet (launching/kubernetes.py builds the objects,
kubernetes_checks.py refuses what the cluster would, kubernetes_run.py applies and follows them). Nothing runs on
this machine: the pods' data is checked as the plan can, and the manifests are written beside plan.json."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.launching import kubernetes, kubernetes_checks, kubernetes_run, preflight
from grpo_exp.planning.placement import NodePlan, Plan


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    kubernetes.finalize(cfg, run_dir)  # a pod's addresses and ports are its own: none is looked up here


def check(cfg: DictConfig, plan: Plan, gpus: int, batch_known: bool) -> list[Problem]:
    problems = kubernetes_checks.check(cfg, plan) + preflight.check_data(cfg, plan, batch_known=batch_known)
    return problems + (kubernetes_run.check_cluster(cfg) if cfg.action == "run" else [])


def build(cfg: DictConfig, plan: Plan, memory: dict) -> tuple[list, list[Problem]]:
    manifests, problems = kubernetes_checks.built(cfg, plan, memory)
    if not problems:
        memory["notes"] += kubernetes.notes(cfg)
    return manifests, problems


def write(run_dir: Path, manifests) -> None:
    kubernetes.write(run_dir, manifests)


def detaches(cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
    return False


def run(cfg: DictConfig, run_dir: Path, plan: Plan, node: NodePlan) -> int:
    return kubernetes_run.run(cfg, run_dir)
