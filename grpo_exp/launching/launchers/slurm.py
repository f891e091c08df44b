"""launcher=slurm: one SLURM job for the whole run (submitit; launching/slurm.py), its node checks as this machine's;
a sweep's independent trials, or `launcher.slurm.wait=false`, only submit (slurm.gather collects a sweep's)."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.core import outcome, rundir
from grpo_exp.launching import slurm
from grpo_exp.launching.launchers.local import build, check, write  # noqa: F401  (as on this machine)
from grpo_exp.planning.placement import NodePlan, Plan

# Where node 0 is, known only inside the job (slurm_task.NodeTask sets it from the job's first host): what the plan
# and config.yaml say until then, never a loopback address the nodes would not meet at.
NODE0_OF_THE_JOB = "<node 0 of the SLURM job>"


def finalize(cfg: DictConfig, run_dir: Path | None) -> None:
    if cfg.topology.nnodes > 1:
        cfg.topology.master_addr = NODE0_OF_THE_JOB


def detaches(cfg: DictConfig, sweeping: bool, independent_trials: bool) -> bool:
    return not cfg.launcher.slurm.wait or (sweeping and independent_trials)


def submit(cfg: DictConfig, run_dir: Path, plan: Plan) -> tuple[int, dict]:
    """Submit this trial's job and go on to the next one (at most max_parallel in flight), or with wait=false leave
    it to SLURM; a refused job ends this trial only (the sweep goes on)."""
    try:
        if cfg.launcher.slurm.wait:
            slurm.submit_pending(cfg, run_dir, plan)
        else:
            job = slurm.submit(cfg, run_dir, plan)
            print(f"submitted SLURM job {job.job_id}: {run_dir}  (grpo-exp compare {run_dir})")
    except slurm.Refused as exc:
        summary = outcome.launch_failed(run_dir, str(exc), wall_s=0.0)
        return summary["exit_code"], summary
    return outcome.EXIT_OK, rundir.read_summary(run_dir)


def run(cfg: DictConfig, run_dir: Path, plan: Plan, node: NodePlan) -> int:
    return slurm.submit_and_wait(cfg, run_dir, plan)
