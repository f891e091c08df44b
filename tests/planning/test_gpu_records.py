"""The planner held to real GPU runs: the H200 records in tests/fixtures/gpu/ (config.yaml, plan.json,
summary.json, metrics.jsonl, console.txt of each case, as ../shared/gpu/run.sh wrote them) re-planned with today's
planner, like with like: the planned peak against NVML's device memory (what OOMs), each phase's planned tensors
(the phase less `runtime` and `allocator_reserve`) against the allocator's `alloc_max`. No GPU is needed."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo_exp.core import metrics
from tests.helpers import FIXTURES, planned

RECORDS = FIXTURES / "gpu" / "h200-2026-11-26"
CASES = sorted(p.name for p in RECORDS.iterdir())
# The card as a topology (this machine has none) and the model as the records built it (random weights)
CARD = ("topology=1x1", "topology.gpu_name=H200", "topology.gpu_memory_gib=139.8", "vllm=off", "logger=none")


def replanned(record: Path) -> dict:
    """The record's run planned again: its model, DeepSpeed and the memory-relevant values of its frozen config."""
    cfg = OmegaConf.load(record / "config.yaml")
    t = cfg.trainer
    overrides = [
        *CARD,
        f"model={cfg.model.name}",
        "model.name_or_path=null",
        f"model.dtype={cfg.model.dtype}",
        f"deepspeed={'zero2' if cfg.deepspeed and cfg.deepspeed.zero_optimization.stage == 2 else 'none'}",
        f"data.max_prompt_length={cfg.data.max_prompt_length}",
    ]
    for key in (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_generations",
        "max_completion_length",
    ):
        overrides.append(f"trainer.{key}={t[key]}")
    overrides.append(f"trainer.activation_checkpointing={str(bool(t.activation_checkpointing)).lower()}")
    return planned(*overrides).memory.train


def summary(record: Path) -> dict:
    return json.loads((record / "summary.json").read_text())


def test_the_records_are_the_kits_output():
    assert CASES == ["a_q05_full", "d_q15_oom_warn", "e_q15_oom_fit", "f_q05_zero2"]
    for case in CASES:
        assert {p.name for p in (RECORDS / case).iterdir()} >= {"config.yaml", "plan.json", "summary.json"}


@pytest.mark.parametrize("case", [c for c in CASES if summary(RECORDS / c)["status"] == "completed"])
def test_planned_peak_within_10_percent_of_nvml(case):
    plan, s = replanned(RECORDS / case), summary(RECORDS / case)
    nvml = s[metrics.peak("train", "device_used_max")]
    assert abs(plan["peak_gib"] - nvml) / nvml <= 0.10, (plan["peak_gib"], nvml)


@pytest.mark.parametrize("case", [c for c in CASES if summary(RECORDS / c)["status"] == "completed"])
def test_each_phase_s_tensors_within_20_percent_of_alloc_max(case):
    plan, s = replanned(RECORDS / case), summary(RECORDS / case)
    c = plan["components_gib"]
    overhead = c["runtime"] + c["allocator_reserve"]
    for phase, gib in plan["phases_gib"].items():
        alloc = s[metrics.peak_phase(phase, "alloc_max")]
        assert abs(gib - overhead - alloc) / alloc <= 0.20, (phase, gib - overhead, alloc)


def test_the_oom_record_is_planned_as_an_oom():
    assert summary(RECORDS / "d_q15_oom_warn")["status"] == "oom"
    assert not replanned(RECORDS / "d_q15_oom_warn")["fits"]
