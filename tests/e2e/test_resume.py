"""Long runs: a stopped run saves a checkpoint and ends `preempted`; `resume=<run dir>` continues it
to the final step with every step logged once, one W&B run, and the same frozen config."""

import shutil
import signal
import time

import pytest

from grpo_exp.core import outcome, rundir
from grpo_exp.results import wandb_file
from tests.helpers import kill_all, run_driver, start_driver

pytestmark = pytest.mark.e2e
STEPS = 16


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, model_cache):
    """A 1-rank run with W&B offline, saving every 4 steps, stopped by SIGTERM after step 6 (once per module)."""
    where = tmp_path_factory.mktemp("stopped")
    run_dir = where / "run"
    driver = start_driver(
        where,
        model_cache,
        "topology.cpu_procs=1",
        "logger.mode=offline",
        f"trainer.max_steps={STEPS}",
        "trainer.save_strategy=steps",
        "trainer.save_steps=4",
        f"hydra.run.dir={run_dir}",
    )
    try:
        deadline = time.time() + 180
        while len(rundir.read_metrics(run_dir)) < 6 and time.time() < deadline:
            time.sleep(0.2)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=120) == outcome.EXIT_PREEMPTED, driver.stdout.read()[-3000:]
    finally:
        kill_all([driver])
    return run_dir


@pytest.fixture
def preempted(stopped_run, tmp_path):
    """This test's own copy of the stopped run (a resume changes the dir it continues)."""
    return shutil.copytree(stopped_run, tmp_path / "run", symlinks=True)


def test_preempted_run_resumes_to_the_final_step(preempted, model_cache, tmp_path):
    run_dir = preempted
    stopped = rundir.read_summary(run_dir)
    k = stopped["global_step"]
    assert stopped["status"] == "preempted" and stopped["exit_code"] == 75 and 6 <= k < STEPS
    assert rundir.latest_checkpoint(run_dir)[1] == k  # saved at the stop, not only at save_steps

    result = run_driver(tmp_path, model_cache, f"resume={run_dir}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == STEPS
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == list(range(1, STEPS + 1))
    assert [r["from_step"] for r in summary["resumes"]] == [k]
    assert summary["memory/peak/train/host_rss_max_gib"] >= stopped["memory/peak/train/host_rss_max_gib"]
    # one W&B run: both segments carry the id kept in the run dir (wandb sync merges them)
    run_id = (run_dir / "wandb_id").read_text().strip()
    segments = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(segments) == 2 and all(s.name.endswith(run_id) for s in segments)
    last = wandb_file.read_run(next(segments[-1].glob("run-*.wandb")))
    assert last.summary["status"] == "completed" and last.exit_code == 0
    # Hydra's own dir for the resume command is removed: the run's files are in the run dir only
    assert [p for p in tmp_path.glob("outputs/**/*") if p.is_file()] == []

    again = run_driver(tmp_path, model_cache, f"resume={run_dir}")
    assert again.returncode == 0 and "already completed at step 16" in again.stdout + again.stderr


def test_resume_without_a_checkpoint_starts_over_and_drops_the_logged_steps(preempted, model_cache, tmp_path):
    run_dir = preempted
    shutil.rmtree(run_dir / rundir.CHECKPOINTS)
    result = run_driver(tmp_path, model_cache, f"resume={run_dir}", "trainer.max_steps=3")  # a resumable override
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == [1, 2, 3]
    assert "max_steps: 3" in (run_dir / rundir.CONFIG).read_text()
    assert [r["from_step"] for r in rundir.read_summary(run_dir)["resumes"]] == [0]


def test_resume_refuses_what_would_change_the_run(tmp_path, model_cache):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / rundir.CONFIG).write_text("model: {name: tiny}\n")
    result = run_driver(
        tmp_path,
        model_cache,
        f"resume={run_dir}",
        "model=qwen7b",
        "trainer.per_device_train_batch_size=8",
        "trainer.max_steps=9",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "model: would change the run's shape" in result.stderr
    assert (
        "trainer.per_device_train_batch_size: would change" in result.stderr
        and "trainer.max_steps:" not in result.stderr
    )
    result = run_driver(tmp_path, model_cache, f"resume={tmp_path / 'nothing'}")
    assert result.returncode == 2 and "resume: " in result.stderr and "not a grpo_exp run dir" in result.stderr
