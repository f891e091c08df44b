"""launcher=slurm: one SLURM job for the whole run (submitit; jobs.py), its node checks as this machine's;
a sweep's independent trials, or `launcher.slurm.wait=false`, only submit (gather collects a sweep's)."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.core import outcome, rundir
from grpo_exp.core.records import Summary
from grpo_exp.launching import preflight
from grpo_exp.launching.launchers.local.launcher import build, write  # noqa: F401  (nothing beside plan.json)
from grpo_exp.launching.launchers.slurm import jobs
from grpo_exp.planning.placement import NodePlan, Plan

# Where node 0 is, known only inside the job (task.NodeTask sets it from the job's first host): what the plan
# and config.yaml say until then, never a loopback address the nodes would not meet at.
NODE0_OF_THE_JOB = "<node 0 of the SLURM job>"


PICKS_PORTS_HERE = True  # as before the job existed: a one-node job's `auto` ports are free ones of this machine


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    if cfg.topology.nnodes > 1:
        cfg.topology.master_addr = NODE0_OF_THE_JOB


def check(cfg: DictConfig, plan: Plan, gpus: int, batch_known: bool) -> list[Problem]:
    """action=run: this machine's preflight as a node's (each node checks what it must reach inside the job,
    task.py), and whether SLURM takes the job as it will be submitted (sbatch --test-only); action=plan: the data."""
    if cfg.action != "run":
        return preflight.check_data(cfg, plan, batch_known=batch_known)
    return preflight.check(cfg, plan, gpus, batch_known=batch_known) + jobs.test_only(cfg, plan)


def detaches(cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
    return not cfg.launcher.slurm.wait or (sweeping and independent_trials)


def submit(cfg: DictConfig, run_dir: Path, plan: Plan) -> tuple[int, Summary]:
    """Submit this trial's job and go on to the next one (at most max_parallel in flight), or with wait=false leave
    it to SLURM; a refused job ends this trial only (the sweep goes on)."""
    try:
        if cfg.launcher.slurm.wait:
            jobs.submit_pending(cfg, run_dir, plan)
        else:
            job = jobs.submit(cfg, run_dir, plan)
            print(f"submitted SLURM job {job.job_id}: {run_dir}  (grpo-exp compare {run_dir})")
    except jobs.Refused as exc:
        return outcome.EXIT_FAILED, outcome.launch_failed(run_dir, str(exc), wall_s=0.0)
    return outcome.EXIT_OK, rundir.read_summary(run_dir)


def run(cfg: DictConfig, run_dir: Path, plan: Plan, node: NodePlan) -> int:
    return jobs.submit_and_wait(cfg, run_dir, plan)


def gather() -> None:
    jobs.gather()
