"""launcher=slurm on a real SLURM cluster: the one-node cluster scripts/slurm_local.sh sets up
(.ci/run runs it where it can). Skipped, with the reason, where no cluster answers."""

import shutil
import signal
import subprocess
import time

import pytest

from grpo_exp.core import outcome, rundir
from grpo_exp.training import build
from tests.conftest import compose_cfg


def _cluster_problem() -> str | None:
    if shutil.which("sbatch") is None:
        return "no sbatch on PATH (sudo bash scripts/slurm_local.sh sets up a one-node cluster)"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout.split()
    except (subprocess.SubprocessError, OSError) as exc:
        return f"sinfo failed: {exc}"
    if not any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in states):
        return f"no SLURM node is up (sinfo: {states or 'nothing'}); sudo bash scripts/slurm_local.sh starts one"
    return None


PROBLEM = _cluster_problem()
# One node, 2 CPUs: its tests run one after another on one xdist worker (make test: --dist loadgroup).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROBLEM is not None, reason=f"real SLURM: {PROBLEM}"),
    pytest.mark.xdist_group("slurm"),
]
SLURM = [
    "launcher=slurm",
    "launcher.slurm.cpus_per_task=1",
    "launcher.slurm.time_min=10",
    "logger=none",
    "topology.cpu_procs=1",
]


def _squeue(job_id: str, field: str = "%T") -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", field], capture_output=True, text=True).stdout.strip()


def test_a_failing_run_brings_its_status_and_exit_code_back(cli, tmp_path, model_cache, monkeypatch):
    """A model that passes the driver's checks and fails in the worker while loading (as in test_e2e)."""
    monkeypatch.setenv("GRPO_EXP_CACHE", str(model_cache))
    broken = tmp_path / "broken_model"
    shutil.copytree(build.model_path(compose_cfg()), broken)
    (broken / "config.json").write_text('{"model_type": "no_such_architecture"}')
    result, run_dir = cli(*SLURM, f"model.name_or_path={broken}")
    summary = rundir.read_summary(run_dir)
    assert result.returncode == outcome.EXIT_FAILED, result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["status"] == "failed" and "no_such_architecture" in summary["error"]


def test_an_oom_trial_is_a_result_and_trials_run_at_the_same_time(cli):
    """A 2-trial sweep as concurrent jobs (2 CPUs: both at once); one trial OOMs on purpose."""
    result, sweep_dir = cli(
        *SLURM,
        "trainer.max_steps=2",
        "memory.limit_gib=3",
        "launcher.slurm.max_parallel=2",
        "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
        "+data.rewards.hog.only_rank=0",
        "+data.rewards.hog.gib=0,8",
        multirun=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summaries = [rundir.read_summary(d) for d in sorted(p.parent for p in sweep_dir.glob("*/summary.json"))]
    assert len(summaries) == 2
    statuses = sorted(s["status"] for s in summaries)
    assert statuses == ["completed", "oom"], statuses
    assert "oom" in result.stdout and "completed" in result.stdout  # the sweep's table
    spans = sorted((s["started_at"], s["ended_at"]) for s in summaries)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False)), f"no two trials overlapped: {spans}"


def test_frontier_bisects_its_lines_concurrently(cli):
    """The frontier sweeper launches one probe per num_generations line per round: on SLURM they
    run as concurrent jobs, and the frontier is the same as one at a time (tests/test_sweeps.py)."""
    import json

    result, sweep_dir = cli(
        *SLURM,
        "trainer.max_steps=1",
        "memory.limit_gib=5",
        "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
        "+data.rewards.hog.gib_per_unit=0.15",
        "+sweep=frontier",
        "hydra.sweeper.batch_values=[4,8,16]",
        "hydra.sweeper.axis_values=[2,4]",
        multirun=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads((sweep_dir / "frontier.json").read_text())["frontier"] == {"2": 8, "4": 4}
    summaries = [rundir.read_summary(p.parent) for p in sweep_dir.glob("*/summary.json")]
    spans = sorted((s["started_at"], s["ended_at"]) for s in summaries if s.get("started_at"))
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False)), f"no two trials overlapped: {spans}"


def test_wait_false_returns_at_once_and_compare_follows_the_job(cli):
    """launcher.slurm.wait=false: the driver submits, prints the job id and run dir, and returns;
    the job concludes its own summary, and compare reads the dir while and after it runs."""
    from grpo_exp.results import compare

    started = time.time()
    result, run_dir = cli(*SLURM, "trainer.max_steps=2", "launcher.slurm.wait=false")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job_id = rundir.read_summary(run_dir)["slurm_job_id"]
    assert f"submitted SLURM job {job_id}: {run_dir}" in result.stdout
    assert time.time() - started < 30 and rundir.read_summary(run_dir)["status"] == "running"
    assert [run.status for run in compare.load_local(run_dir)] == ["running"]
    deadline = time.time() + 300
    while rundir.read_summary(run_dir).get("status") == "running" and time.time() < deadline:
        time.sleep(1)
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2 and summary["exit_code"] == 0
    assert [run.status for run in compare.load_local(run_dir)] == ["completed"]


def test_a_stopped_driver_cancels_its_job(background_driver, tmp_path):
    run_dir = tmp_path / "run"
    driver = background_driver(*SLURM, "trainer.max_steps=10000", f"hydra.run.dir={run_dir}")
    try:
        deadline = time.time() + 120
        while not rundir.read_summary(run_dir).get("slurm_job_id") and time.time() < deadline:
            time.sleep(1)
        job_id = rundir.read_summary(run_dir).get("slurm_job_id")
        assert job_id, "the job was never submitted"
        while _squeue(job_id) != "RUNNING" and time.time() < deadline:
            time.sleep(1)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=60) == outcome.EXIT_INTERRUPTED, driver.stdout.read()[-3000:]
        deadline = time.time() + 60
        while _squeue(job_id) not in ("", "CANCELLED") and time.time() < deadline:
            time.sleep(1)
        assert _squeue(job_id) in ("", "CANCELLED"), f"job {job_id} outlived its driver: {_squeue(job_id)}"
    finally:
        subprocess.run(["scancel", str(rundir.read_summary(run_dir).get("slurm_job_id", "0"))], capture_output=True)


def test_a_job_warned_of_its_time_limit_requeues_and_resumes_to_the_final_step(background_driver, tmp_path):
    """SLURM's time-limit warning is SIGUSR2 to every process of the job's steps (`--signal=USR2@<s>`,
    which test_slurm checks in the sbatch script); `scancel --signal=USR2` delivers exactly that, now
    rather than minutes in. The ranks save, node 0's task requeues the job, the next attempt resumes
    from the checkpoint. A paced reward (0.4 s a step) keeps the run going until the signal arrives."""
    steps = 40
    run_dir = tmp_path / "run"
    driver = background_driver(
        *SLURM,
        f"trainer.max_steps={steps}",
        "+data.rewards.paced._target_=tests.memory_hog.paced",
        "launcher.slurm.max_requeues=2",
        "preemption.grace_s=20",
        f"hydra.run.dir={run_dir}",
    )
    try:
        deadline = time.time() + 240
        while len(rundir.read_metrics(run_dir)) < 3 and time.time() < deadline:
            time.sleep(0.5)
        job_id = rundir.read_summary(run_dir).get("slurm_job_id")
        assert job_id and len(rundir.read_metrics(run_dir)) >= 3, "the job never trained"
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        # A requeued job waits ~2 minutes before it may start again (BeginTime): the cluster's policy, not
        # grpo_exp's; the test lets it start at once.
        while driver.poll() is None and time.time() < deadline + 300:
            if _squeue(job_id, "%r") == "BeginTime":
                subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)
            time.sleep(1)
        assert driver.wait(timeout=60) == 0, driver.stdout.read()[-3000:]
    finally:
        subprocess.run(["scancel", str(rundir.read_summary(run_dir).get("slurm_job_id", "0"))], capture_output=True)
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == steps, summary
    assert summary["started_at"] < summary["ended_at"] and list((run_dir / rundir.SLURM).glob("*_log.out"))
    assert summary["slurm_restarts"] == 1 and [r["from_step"] for r in summary["resumes"]][0] >= 3, summary
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == list(range(1, steps + 1))
