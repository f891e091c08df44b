"""launcher=slurm: the sbatch script submitit writes (with stand-in sbatch/srun on PATH, so no
cluster is needed), and a real run through submitit's local executor, one task per node."""

import os
import stat
from pathlib import Path

import pytest

from grpo_exp.core import rundir
from grpo_exp.launching.launchers.slurm import jobs as slurm
from grpo_exp.planning import placement
from tests.helpers import compose_cfg


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch that keeps the script it was given and answers like SLURM; srun that exists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    captured = tmp_path / "submitted.sh"
    (bin_dir / "sbatch").write_text(
        f'#!/bin/sh\nfor a; do f="$a"; done\ncp "$f" {captured}\necho "Submitted batch job 4242"\n'
    )
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return captured


def test_sbatch_script_for_2x8_with_vllm_server(fake_slurm, tmp_path):
    cfg = compose_cfg(
        "model=qwen7b",
        "topology=2x8",
        "vllm=server",
        "launcher=slurm",
        "launcher.slurm.partition=gpu",
        "launcher.slurm.account=rl",
        "launcher.slurm.time_min=90",
        "+launcher.slurm.additional.exclusive=true",
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plan = placement.make_plan(cfg, str(run_dir / rundir.CONFIG), detected_gpus=0)
    job = slurm.submit(cfg, run_dir, plan)
    assert job.job_id == "4242"
    script = fake_slurm.read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=rl",
        "#SBATCH --time=90",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --exclusive",
        "#SBATCH --job-name=grpo_exp-default",
        # the time-limit warning SLURM sends every process of the job (test_slurm_real sends it by hand)
        f"#SBATCH --signal=USR2@{cfg.launcher.slurm.signal_delay_s}",
        "#SBATCH --requeue",
    ):
        assert line in script, f"{line} missing from:\n{script}"
    assert "srun" in script and "submitit" in script  # each task unpickles and runs slurm.node_task
    cfg.launcher.slurm.max_requeues = 0  # nothing may requeue: not SLURM either, after a node failure
    slurm.submit(cfg, run_dir, plan)
    assert "#SBATCH --no-requeue" in fake_slurm.read_text() and "#SBATCH --requeue" not in fake_slurm.read_text()


@pytest.mark.e2e
def test_slurm_launcher_through_submitits_local_executor(cli):
    result, run_dir = cli(
        "logger=none",
        "topology=cpu2x1",
        "launcher=slurm",
        "launcher.slurm.cluster=local",
        "trainer.max_steps=2",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["runtime"]["world_size"] == 2
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == [1, 2]
    assert (run_dir / "train.node1.log").exists()  # node 1's task ran its share
    assert list(Path(run_dir, "slurm").glob("*_result.pkl"))


@pytest.mark.parametrize("status,shown", [("failed", "RUNNING"), ("preempted", "CANCELLED"), ("preempted", "RUNNING")])
def test_node_0_asks_slurm_once_how_a_job_that_did_not_complete_stands(status, shown, monkeypatch, tmp_path):
    """Whether SLURM requeued the job itself, and whether it is ending it, come from one `scontrol show job`; a
    preempted run SLURM still runs is requeued by node 0 (scontrol requeue), one SLURM is ending is not."""
    from grpo_exp.launching.launchers.slurm import states, task

    asked, requeued = [], []
    monkeypatch.setattr(states, "ask", lambda *argv: asked.append(argv) or f"JobId=7 JobState={shown} Restarts=0")
    monkeypatch.setattr(task.subprocess, "run", lambda argv, **kw: requeued.append(argv))
    cfg = compose_cfg("launcher=slurm")
    try:
        task._not_completed(cfg, "7", tmp_path, 0, {"status": status, "global_step": 3})
    except SystemExit as exc:
        assert exc.code == 75  # requeued: the next attempt gives the result
    assert asked == [("scontrol", "show", "job", "-o", "7")]
    assert requeued == ([["scontrol", "requeue", "7"]] if (status, shown) == ("preempted", "RUNNING") else [])
