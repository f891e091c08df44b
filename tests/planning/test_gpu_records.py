"""The planner held to real GPU runs: the H200 records in tests/fixtures/gpu/ (config.yaml, plan.json,
summary.json, metrics.jsonl, console.txt of each case, as ../shared/gpu/run.sh and scripts/gpu_lane.sh wrote them)
re-planned with today's planner, like with like: the planned peak against NVML's device memory (what OOMs), each
phase's planned tensors (the phase less `runtime` and `allocator_reserve`) against the allocator's `alloc_max`.
h200-2026-11-26: torch 2.11, transformers 5.17 (the fitted records); h200-2026-11-28: torch 2.11, transformers 5.23,
two of them again and a mixture of experts (Qwen3-30B-A3B's layers, 4 of them) per experts backend, which the planner
was not fitted to. No GPU is needed."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo_exp.core import metrics
from tests.helpers import FIXTURES, planned

RECORD_SETS = {
    "h200-2026-11-26": ["a_q05_full", "d_q15_oom_warn", "e_q15_oom_fit", "f_q05_zero2"],
    "h200-2026-11-28": ["a_q05_full", "d_q15_oom_warn", "g_moe_full", "h_moe_eager"],
}
CASES = [FIXTURES / "gpu" / day / case for day, cases in RECORD_SETS.items() for case in cases]
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
        f"model.num_hidden_layers={cfg.model.num_hidden_layers}",  # the MoE record keeps 4 of the model's layers
        f"model.num_parameters={cfg.model.num_parameters}",
        *([f"model.experts_implementation={cfg.model.experts_implementation}"] if cfg.model.get("num_experts") else []),
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


COMPLETED = [c for c in CASES if summary(c)["status"] == "completed"]


def test_the_records_are_the_kits_output():
    for day, cases in RECORD_SETS.items():
        assert sorted(p.name for p in (FIXTURES / "gpu" / day).iterdir() if p.is_dir()) == cases
    for case in CASES:
        assert {p.name for p in case.iterdir()} >= {"config.yaml", "plan.json", "summary.json"}


@pytest.mark.parametrize("case", COMPLETED, ids=lambda c: f"{c.parent.name}/{c.name}")
def test_planned_peak_within_10_percent_of_nvml(case):
    plan, s = replanned(case), summary(case)
    nvml = s[metrics.peak("train", "device_used_max")]
    assert abs(plan["peak_gib"] - nvml) / nvml <= 0.10, (plan["peak_gib"], nvml)


@pytest.mark.parametrize("case", COMPLETED, ids=lambda c: f"{c.parent.name}/{c.name}")
def test_each_phase_s_tensors_within_20_percent_of_alloc_max(case):
    plan, s = replanned(case), summary(case)
    c = plan["components_gib"]
    overhead = c["runtime"] + c["allocator_reserve"]
    for phase, gib in plan["phases_gib"].items():
        alloc = s[metrics.peak_phase(phase, "alloc_max")]
        assert abs(gib - overhead - alloc) / alloc <= 0.20, (phase, gib - overhead, alloc)


@pytest.mark.parametrize("day", RECORD_SETS)
def test_the_oom_record_is_planned_as_an_oom(day):
    record = FIXTURES / "gpu" / day / "d_q15_oom_warn"
    assert summary(record)["status"] == "oom"
    assert not replanned(record)["fits"]
