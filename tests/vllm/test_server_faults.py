"""A vLLM server never hangs a run: one that never becomes healthy, one that dies while training runs and one
that stops answering during a weight sync each end the run within its timeout, naming the server (or the stuck
rank and phase) with the server's last log lines; nothing of the run is lost. Real vLLM (make test-vllm)."""

import time

import pytest

from grpo_exp.core import outcome, rundir
from tests.helpers import run_driver

pytestmark = pytest.mark.vllm

# preemption.grace_s: how long the driver lets ranks save a checkpoint once the run ends; with the server gone they
# cannot reach a step's end, so the default (60 s) would only be waited out
SERVER = ("logger=none", "vllm=server", "vllm.enforce_eager=true", "topology.cpu_procs=1", "preemption.grace_s=5")


def _run(tmp_path, model_cache, *overrides):
    started = time.time()
    result = run_driver(tmp_path, model_cache, *SERVER, *overrides, f"hydra.run.dir={tmp_path / 'run'}", timeout=600)
    return result, rundir.read_summary(tmp_path / "run"), time.time() - started


def test_a_server_that_never_answers_fails_the_run_with_its_last_lines(tmp_path, model_cache):
    # a context longer than the tiny model's 512 positions: vLLM refuses to start and exits
    result, summary, _ = _run(tmp_path, model_cache, "vllm.max_model_length=100000", "preflight.on_oom=warn")
    assert result.returncode == outcome.EXIT_FAILED and summary["status"] == "failed", result.stderr[-2000:]
    assert "the vLLM server exited before answering" in summary["error"]
    assert "max_model_len" in summary["error"] or "100000" in summary["error"]  # vLLM's own reason, quoted
    assert "Traceback" not in result.stderr.split("run report")[-1]


def test_a_server_that_dies_while_training_ends_the_run_at_once(tmp_path, model_cache):
    kill = "+data.rewards.kill._target_=tests.vllm.server_faults.kill_server"
    result, summary, took = _run(tmp_path, model_cache, "trainer.max_steps=50", kill)
    assert result.returncode == outcome.EXIT_FAILED and summary["status"] == "failed", result.stderr[-2000:]
    assert "the vLLM server exited with code -9 while training ran" in summary["error"]
    assert took < 240  # not the 50 steps, nor a client's retries and timeouts
    assert (tmp_path / "run" / rundir.METRICS).read_text()  # the steps before it are kept


def test_a_weight_sync_that_stalls_is_caught_by_the_watchdog_with_its_phase_and_rank(tmp_path, model_cache):
    result, summary, took = _run(
        tmp_path,
        model_cache,
        "trainer.max_steps=50",
        "watchdog.stall_s=30",
        "+data.rewards.stop._target_=tests.vllm.server_faults.stop_server",
    )
    assert summary["status"] == "stalled" and result.returncode == outcome.EXIT_CODES["stalled"], result.stderr[-2000:]
    assert "rank0 in phase weight_sync" in summary["error"]
    assert (tmp_path / "run" / rundir.STACKS / "rank0.txt").read_text()  # where it waits: the sync's HTTP call
    assert took < 240
