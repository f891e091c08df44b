"""grpo_exp's own runs on a real GPU: the CUDA paths the CPU lanes cannot take. Marked `gpu`, skipped without a CUDA
GPU, run by scripts/gpu_lane.sh on a GPU machine (the tiny model: a few seconds each)."""

import pytest

from grpo_exp.core import metrics, outcome, rundir

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
COMMON = ("topology=local", "logger=none", "trainer.max_steps=2", "trainer.save_strategy=no")


def test_a_run_on_the_gpu_measures_every_phase_like_with_like(cli):
    result, run_dir = cli(*COMMON, "model.dtype=bfloat16")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    plan = rundir.read_json(run_dir / rundir.PLAN)
    assert plan["card_source"] == "detected" and plan["gpu_name"] == torch.cuda.get_device_name(0)
    for phase in ("generate", "reward", "train", "optimizer"):
        assert summary[metrics.peak_phase(phase, "alloc_max")] > 0
    assert summary[metrics.peak("train", "device_used_max")] >= summary[metrics.peak("train", "reserved_max")]
    assert metrics.plan_error("peak") in rundir.plan_errors(summary)


def test_deepspeed_over_nccl_on_one_rank(cli):
    result, run_dir = cli(*COMMON, "model.dtype=bfloat16", "deepspeed=zero2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert rundir.read_summary(run_dir)["status"] == "completed"


def test_a_cuda_oom_keeps_its_record_and_on_oom_fit_fits(cli, tmp_path):
    """memory.limit_gib caps the allocator's fraction of the card: a batch the plan says cannot fit runs out of CUDA
    memory under on_oom=warn (recorded: the phases it ran, the allocator's numbers), and on_oom=fit completes."""
    big = (
        *COMMON,
        "model=qwen0.5b",
        "model.name_or_path=null",
        "memory.limit_gib=6",
        "trainer.per_device_train_batch_size=64",
        "trainer.num_generations=8",
        "trainer.max_completion_length=256",
        "trainer.activation_checkpointing=false",
    )
    anyway, oom_dir = cli(*big, "preflight.on_oom=warn", run_dir=tmp_path / "anyway")
    assert anyway.returncode == outcome.EXIT_OOM, anyway.stdout[-3000:]
    died = rundir.read_summary(oom_dir)
    assert died["oom"]["kind"] == "cuda" and died[metrics.peak_phase("generate", "alloc_max")] > 0
    fitted, fit_dir = cli(*big, "preflight.on_oom=fit", run_dir=tmp_path / "fitted")
    assert fitted.returncode == 0, fitted.stdout[-3000:]
    assert rundir.read_summary(fit_dir)["status"] == "completed"
