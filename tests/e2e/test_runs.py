"""Real GRPO training of the tiny model through the CLI: one process, DDP, ZeRO-2/3, LoRA, a local
GSM8K file, a multirun, a failing run and an interrupted one. Each asserts what the run dir says
and what torch.distributed / the wrapped model were inside the run. The one-process, 2-rank and
multirun runs are the session's shared ones (conftest.py), which other modules read too."""

import json
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from grpo_exp.core import outcome, rundir
from tests.helpers import FIXTURES, compose_cfg, matrix

pytestmark = pytest.mark.e2e
STEPS = 2


def assert_trained(result, run_dir, steps=STEPS, states_on_the_device=True) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["exit_code"] == 0
    assert summary["global_step"] == steps
    metrics = rundir.read_metrics(run_dir)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    for m in metrics:
        assert isinstance(m["loss"], float) and isinstance(m["reward"], float), m
        assert "rewards/correctness/mean" in m
    assert (run_dir / rundir.CONFIG).is_file() and (run_dir / rundir.LOG).stat().st_size > 0
    if states_on_the_device:  # offloaded states are host RAM: planned per node (assert_host_ram_as_planned)
        assert_planner_matches_model_states(summary)
    return summary


def assert_planner_matches_model_states(summary: dict) -> None:
    """Calibration: the planner's parameter/gradient/optimizer bytes per rank vs the real tensors."""
    for part in ("weights", "gradients", "optimizer"):
        measured, planned = summary[f"measured/train/{part}_gib"], summary[f"plan/train/{part}_gib"]
        assert planned == pytest.approx(measured, rel=0.05), (part, planned, measured)
    assert abs(summary["plan_error/train/model_states_pct"]) < 5


def test_default_single_process_with_wandb_offline(one_rank_run):
    result, run_dir = one_rank_run
    summary = assert_trained(result, run_dir)
    assert summary["runtime"]["world_size"] == 1
    assert summary["runtime"]["wrapper"] == "Qwen2ForCausalLM"
    # Offline W&B run inside the run dir: a binary .wandb log (wandb's LevelDB-style format).
    files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1 and files[0].read_bytes()[:4] == b":W&B"
    # The frozen config is what the run used, fully resolved (no interpolations left).
    frozen = (run_dir / rundir.CONFIG).read_text()
    assert "${" not in frozen and "bf16: false" in frozen


def test_two_processes_real_ddp_over_gloo(two_rank_run):
    result, run_dir = two_rank_run
    summary = assert_trained(result, run_dir)
    assert summary["runtime"]["world_size"] == 2
    assert summary["runtime"]["backend"] == "gloo"
    assert summary["runtime"]["wrapper"] == "DistributedDataParallel"
    assert "[rank1]" in (run_dir / rundir.LOG).read_text()


# Host RAM of a node, planned (planning/host_memory.py) against its ranks' RSS peaks added up, on CPU runs:
# measured within +3% (ZeRO-2 offload) and +11% (FSDP2) of the plan here; the tolerance leaves room for the
# allocator's and the libraries' versions.
HOST_TOLERANCE = 0.25


def assert_host_ram_as_planned(summary: dict) -> None:
    node, rank = summary["memory/peak/train/node_rss_max_gib"], summary["memory/peak/train/host_rss_max_gib"]
    assert rank < node <= 2 * rank  # two ranks on the one node
    assert summary["plan/host/peak_gib"] == pytest.approx(node, rel=HOST_TOLERANCE), (
        summary["plan/host/peak_gib"],
        node,
    )


# make test: ZeRO-3 (sharded parameters, the gather for generation); make test-matrix: ZeRO-1 and ZeRO-2 with the
# optimizer offloaded too (its CPU Adam is compiled on first use: ~80 s on 2 cores)
@pytest.mark.parametrize("option", matrix(["zero1", "zero2_offload", "zero3"], lambda option: option == "zero3"))
def test_deepspeed_zero_on_two_processes(cli, option):
    """ZeRO-2 runs with its optimizer offloaded to host RAM (torch's AdamW on the CPU partitions: DeepSpeedCPUAdam
    would cost a C++ build per fresh machine), and that node's RAM is what the plan said."""
    offload = ["+deepspeed.zero_force_ds_cpu_optimizer=false"] if "offload" in option else []
    result, run_dir = cli("logger=none", f"deepspeed={option}", *offload, f"trainer.max_steps={STEPS}")
    summary = assert_trained(result, run_dir, states_on_the_device=not offload)
    assert summary["runtime"]["world_size"] == 2 and summary["runtime"]["backend"] == "gloo"
    assert summary["runtime"]["wrapper"] == "DeepSpeedEngine"
    assert summary["runtime"]["zero_stage"] == int(option[4])
    assert summary["runtime"]["trainable_parameters"] == 107072  # ZeRO-3 shards still count whole
    if offload:
        assert summary["plan/host/offloaded_states_gib"] == pytest.approx(16 * 107072 / 2**30)
        assert summary["plan/train/optimizer_gib"] == 0  # none planned beside the training process
        assert_host_ram_as_planned(summary)


def test_fsdp2_shards_every_state_over_two_cpu_ranks_as_planned(cli):
    """FSDP2 (fully_shard, DTensor parameters) through TRL and accelerate on CPU ranks: each rank holds half of the
    weights, gradients and AdamW moments, which the planner's terms equal; host RAM per node as planned."""
    result, run_dir = cli("logger=none", "fsdp=full_shard", f"trainer.max_steps={STEPS}")
    summary = assert_trained(result, run_dir)
    runtime = summary["runtime"]
    assert (runtime["world_size"], runtime["backend"], runtime["fsdp"]) == (2, "gloo", True)
    assert runtime["wrapper"] == "FSDPQwen2ForCausalLM" and runtime["parameters"] == 107072  # global shapes
    half = 107072 * 4 / 2 / 2**30  # fp32, one of two shards
    for part, copies in (("weights", 1), ("gradients", 1), ("optimizer", 2)):
        assert summary[f"measured/train/{part}_gib"] == pytest.approx(copies * half, rel=1e-3)
        assert summary[f"plan/train/{part}_gib"] == pytest.approx(copies * half, rel=1e-3)
    assert_host_ram_as_planned(summary)
    assert all(f"memory/{phase}/node_rss_max_gib" in m for m in rundir.read_metrics(run_dir) for phase in ("train",))


def test_lora_trains_only_adapters_on_a_local_gsm8k_file_without_its_long_prompts(cli):
    """Two features, one run: LoRA adapters (with a reference model: beta > 0) and GSM8K read from a
    local file, whose prompts above data.max_prompt_length are dropped."""
    fixture = str(FIXTURES / "gsm8k_sample.jsonl")
    result, run_dir = cli(
        "logger=none",
        "peft=lora",
        "trainer.beta=0.04",
        "data=gsm8k",
        f"data.path={fixture}",
        "data.max_prompt_length=200",
        "topology.cpu_procs=1",
        "trainer.per_device_train_batch_size=2",
        "trainer.num_generations=2",
        f"trainer.max_steps={STEPS}",
    )
    summary = assert_trained(result, run_dir)
    runtime = summary["runtime"]
    assert runtime["wrapper"].startswith("PeftModel")
    # r=16 adapters on 7 linear layers x 2 layers of the tiny Qwen2: 32768 trainable parameters.
    assert runtime["trainable_parameters"] == 32768
    assert runtime["parameters"] == 107072 + 32768
    log = (run_dir / rundir.LOG).read_text()
    assert "data.max_prompt_length=200: dropped" in log
    dropped = int(log.split("data.max_prompt_length=200: dropped ")[1].split()[0])
    assert dropped == 5  # prompts of 137, 150 and 172 tokens stay; 234..405 go


def test_too_few_prompts_after_filtering_fail_the_run_instead_of_training_0_steps(cli):
    """The driver counts the file's 8 rows; only the worker knows that data.max_prompt_length keeps 1."""
    fixture = str(FIXTURES / "gsm8k_sample.jsonl")
    result, run_dir = cli(
        "logger=none",
        "data=gsm8k",
        f"data.path={fixture}",
        "data.max_prompt_length=145",
        "topology.cpu_procs=1",
        "trainer.per_device_train_batch_size=4",
        "trainer.num_generations=2",
        f"trainer.max_steps={STEPS}",
    )
    summary = rundir.read_summary(run_dir)
    assert result.returncode == 1 and summary["status"] == "failed" and summary.get("global_step", 0) == 0
    assert "after loading and filtering holds 1 prompts, too few" in summary["error"]


def test_multirun_sweeps_two_jobs(two_job_sweep):
    result, sweep_dir = two_job_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    for job, env in (("0", "none"), ("1", "number_game")):
        summary = rundir.read_summary(sweep_dir / job)
        assert summary["status"] == "completed" and summary["world_size"] == 2
        assert f"name: {env}" in (sweep_dir / job / rundir.CONFIG).read_text()


def test_failure_in_worker_is_recorded(build, cli, tmp_path, model_cache, monkeypatch):
    """A model whose config.json names no known architecture: passes the driver's checks, fails in
    the worker while loading."""
    monkeypatch.setenv("GRPO_EXP_CACHE", str(model_cache))
    broken = tmp_path / "broken_model"
    shutil.copytree(build.model_path(compose_cfg()), broken)
    (broken / "config.json").write_text('{"model_type": "no_such_architecture"}')
    result, run_dir = cli("logger=none", "topology.cpu_procs=1", f"model.name_or_path={broken}")
    assert result.returncode == 1
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "failed" and summary["exit_code"] == 1
    assert "no_such_architecture" in summary["error"]
    assert "training failed" in (run_dir / rundir.LOG).read_text()


def test_signal_to_driver_saves_a_checkpoint_and_ends_every_process(training_run):
    """A stopped run is preempted, not lost: both ranks agree on a step, save it, and end. SIGTERM, SIGHUP, SIGUSR1/2
    and Ctrl-C share one handler (launch.raise_interrupt); a second signal a second later (a scheduler's TERM, then a
    user's Ctrl-C) waits for the wind-down: the record is concluded all the same (cut short, it stayed running)."""
    driver, run_dir, processes = training_run
    ranks = [
        p for p in processes if "grpo_exp.training.worker" in p.cmdline() and "torch.distributed.run" not in p.cmdline()
    ]
    assert len(ranks) == 2  # plus torchrun's agent
    driver.send_signal(signal.SIGTERM)
    time.sleep(1)
    driver.send_signal(signal.SIGINT)
    assert driver.wait(timeout=90) == outcome.EXIT_PREEMPTED
    gone, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    summary = json.loads((run_dir / rundir.SUMMARY).read_text())
    assert summary["status"] == "preempted" and f"resume={run_dir}" in summary["error"]
    assert any(key.startswith("memory/peak") for key in summary)
    checkpoint, step = rundir.latest_checkpoint(run_dir)
    assert step == summary["global_step"] == rundir.read_metrics(run_dir)[-1]["step"]


def test_killing_one_rank_ends_the_whole_run(training_run):
    driver, run_dir, processes = training_run
    rank1 = [p for p in processes if "grpo_exp.training.worker" in p.cmdline() and p.environ().get("RANK") == "1"]
    assert len(rank1) == 1
    rank1[0].send_signal(signal.SIGKILL)
    assert driver.wait(timeout=60) == outcome.EXIT_FAILED
    gone, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "failed"
    # either torchrun's report of the killed rank, or rank 0's view of it: the peer went away
    assert any(word in summary["error"] for word in ("SIGKILL", "remote worker", "Connection closed")), summary["error"]


def test_user_code_in_the_workers_imports_every_library_it_likes(two_rank_run):
    """A reward that imports peft, deepspeed, bitsandbytes and each tracker, in a run that uses none of them; it
    writes its report where it runs: env.working_dir."""
    from tests.user_code import LIBRARIES, REPORT

    _, run_dir = two_rank_run
    found = json.loads((Path(rundir.load_config(run_dir / rundir.CONFIG).env.working_dir) / REPORT).read_text())
    failed = {name: found.get(name) for name in LIBRARIES if ":" in str(found.get(name, ":missing"))}
    assert not failed, failed
