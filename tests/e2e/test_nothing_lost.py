"""Nothing lost, nothing exposed: a run dir belongs to one run, default dirs are unique, the vLLM
server listens only where trainers are, ports are chosen and checked before launch, a stopped
launcher=slurm driver cancels its job, and secrets never reach the run dir."""

import hashlib
import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from grpo_exp.core import outcome, rundir
from tests.helpers import SECRETS, run_driver


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.mark.e2e
def test_a_run_dir_belongs_to_one_run(one_rank_run, tmp_path, model_cache):
    """Another run started in the session's one-process run dir is refused before Hydra writes a byte."""
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stderr[-2000:]
    before = {
        p: md5(p)
        for p in [
            run_dir / rundir.METRICS,
            run_dir / rundir.SUMMARY,
            run_dir / rundir.CONFIG,
            run_dir / ".hydra" / "overrides.yaml",
        ]
    }
    again = run_driver(tmp_path, model_cache, "logger=none", "topology.cpu_procs=1", f"hydra.run.dir={run_dir}")
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert (
        "hydra.run.dir:" in again.stderr
        and "already holds a run (status: completed)" in again.stderr
        and "resume=" in again.stderr
    )
    assert {p: md5(p) for p in before} == before  # nothing of the first run mixed or overwritten


@pytest.mark.e2e
def test_two_default_runs_side_by_side_both_complete(tmp_path, background_driver):
    runs = [background_driver("logger=none", "trainer.max_steps=1") for _ in range(2)]
    assert [p.wait(timeout=300) for p in runs] == [0, 0], [p.stdout.read()[-2000:] for p in runs]
    dirs = sorted((tmp_path / "outputs" / "default").iterdir())
    assert len(dirs) == 2 and all(rundir.read_summary(d)["status"] == "completed" for d in dirs)


@pytest.mark.e2e
def test_stopping_a_slurm_driver_cancels_its_job(tmp_path, background_driver):
    """submitit's local executor stands in for sbatch (tests/launching/test_slurm_real.py has the real cluster,
    stopped by SIGTERM; here SIGHUP, a closed terminal: both take slurm.py's one handler)."""
    run_dir = tmp_path / "run"
    proc = background_driver(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=100000",
        "launcher=slurm",
        "launcher.slurm.cluster=local",
        f"hydra.run.dir={run_dir}",
        stdout=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    while not rundir.read_metrics(run_dir) and time.time() < deadline:
        time.sleep(0.5)
    assert rundir.read_metrics(run_dir), "the job never logged a step"
    job_processes = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=120) in (outcome.EXIT_INTERRUPTED, outcome.EXIT_PREEMPTED)
    gone, alive = psutil.wait_procs(job_processes, timeout=60)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert rundir.read_summary(run_dir)["status"] in ("interrupted", "preempted")


@pytest.mark.e2e
def test_secrets_never_land_in_the_run_dir(one_rank_run, mlflow_server):
    """The session's one-process run had SECRETS in its environment, W&B offline and MLflow at a server."""
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stderr[-2000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files) and (run_dir / rundir.PLAN).is_file()
    markers = [*SECRETS.values(), *([mlflow_server] if mlflow_server else [])]  # the tracker's URI stays in its env
    leaked = [str(p) for p in files for marker in markers if marker.encode() in p.read_bytes()]
    assert leaked == []
    # the per-node env is there, without secrets
    assert json.loads((run_dir / rundir.PLAN).read_text())["nodes"][0]["env"]["train"]
