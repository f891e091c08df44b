"""The vLLM engine on vLLM's own rules (planning/vllm_engine.py), checked against public start-up logs
(tests/fixtures/vllm_startup_logs.yaml, parsed by core/vllm_log.py), and the engine's shapes, flags, admission
and sleep mode as the planner applies them."""

import dataclasses
import math

import pytest
import yaml

from grpo_exp import GIB
from grpo_exp.core import vllm_log
from grpo_exp.planning import inputs, memory, placement, vllm_engine
from tests.helpers import FIXTURES, compose_cfg, fast_lane, planned

CASES = yaml.safe_load((FIXTURES / "vllm_startup_logs.yaml").read_text())
DEFAULT_TOLERANCE_GIB = 1.2


def case_inputs(case: dict) -> inputs.Inputs:
    """The planner's inputs for a logged engine: the model, GPU, util, TP and context the log names, the profile
    batch that vLLM version chose, its version (graphs inside the budget from 0.21)."""
    overrides = [
        f"model={case['model']}",
        "vllm=server",
        "topology=1x8",
        f"topology.gpu_memory_gib={case['gpu_total_gib']}",
        f"vllm.gpu_memory_utilization={case['util']}",
        f"vllm.tensor_parallel_size={case['tp']}",
        f"vllm.gpus={case['tp']}",
        f"vllm.max_model_length={case['max_model_len']}",
        *(f"model.{k}={v}" for k, v in (case.get("arch") or {}).items()),
    ]
    q = case.get("quantization")
    if q:
        overrides += ["peft=qlora", f"model.quantization.method={q['method']}", f"model.quantization.bits={q['bits']}"]
        overrides.append("model.quantization.prequantized=true")  # vLLM holds the weights at those bits
    cfg = compose_cfg(*overrides)
    x = inputs.inputs(cfg, placement.make_plan(cfg, "config.yaml", detected_gpus=8))
    version = tuple(int(p) for p in case["version"].split(".")[:2])
    shape = case["shape"]
    return dataclasses.replace(
        x, vllm_batched_tokens=shape["tokens"], vllm_max_seqs=shape["seqs"], vllm_version=version
    )


def test_ten_public_startup_logs_at_least():
    assert len(CASES) >= 10 and len({c["id"] for c in CASES}) == len(CASES)
    assert {c["version"].split(".")[1] for c in CASES} >= {"6", "7", "8", "22"}  # the rules across versions


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_parser_reads_every_figure_vllm_logged(case):
    found = vllm_log.parse(case["log"])
    for figure, value in case["logged"].items():
        if figure not in case.get("prose_only", []):
            assert found[figure] == (pytest.approx(value) if isinstance(value, float | int) else value), figure


@pytest.mark.parametrize("case", fast_lane(CASES, lambda c: c is CASES[0]), ids=[c["id"] for c in CASES])
def test_planned_kv_cache_against_the_logged_one(case):
    """The KV cache vLLM sized, planned from the model's architecture and the engine's settings alone (weights
    included: they are planned, not read from the log); the engine starts exactly when vLLM's did."""
    x = case_inputs(case)
    engine = vllm_engine.estimate(x, server=False)
    logged = case["logged"]
    logged_kv = logged.get("kv_cache_gib", logged.get("kv_tokens", 0) * vllm_engine.kv_bytes_per_token(x) / GIB)
    planned_kv = engine.components["kv_cache"] / GIB
    assert abs(planned_kv - max(logged_kv, 0.0)) <= case.get("tolerance_gib", DEFAULT_TOLERANCE_GIB), (
        planned_kv,
        logged_kv,
    )
    assert engine.starts == case.get("started", True)
    assert engine.components["weights"] / GIB == pytest.approx(logged["weights_gib"], abs=0.2)


def test_cuda_graphs_sit_inside_the_budget_from_vllm_0_21_and_eager_mode_has_none(monkeypatch):
    x = planned("model=qwen7b", "topology=1x8", "vllm=server", "vllm.gpu_memory_utilization=0.9").inputs
    new = vllm_engine.estimate(dataclasses.replace(x, vllm_version=(0, 22)), server=True)
    inside = {k: v for k, v in new.components.items() if k != "weight_sync_buffers"}
    assert sum(inside.values()) == pytest.approx(0.9 * 80 * GIB) and new.components["cuda_graphs"] > 0
    assert new.peak == pytest.approx(0.9 * 80 * GIB + vllm_engine.WEIGHT_SYNC_BUFFERS)
    old = vllm_engine.estimate(dataclasses.replace(x, vllm_version=(0, 20)), server=True)
    assert old.components["kv_cache"] == pytest.approx(new.components["kv_cache"] + new.components["cuda_graphs"])
    assert old.peak == pytest.approx(new.peak + new.components["cuda_graphs"])  # on top of the budget
    monkeypatch.setenv(vllm_engine.GRAPHS_ESTIMATE_ENV, "0")  # vLLM's switch back to the old rule
    assert vllm_engine.estimate(dataclasses.replace(x, vllm_version=(0, 22)), server=True).peak == pytest.approx(
        old.peak
    )
    eager = vllm_engine.estimate(dataclasses.replace(x, vllm_eager=True), server=True)
    assert eager.components["cuda_graphs"] == 0
    assert planned("model=qwen7b", "topology=1x8", "vllm=server", "vllm.enforce_eager=true").inputs.vllm_eager


def test_captured_graphs_as_vllm_logs_them():
    """vLLM: "PIECEWISE=35 (largest=256), FULL=19 (largest=128)" at 128 sequences; 51 + 35 at 256 and above."""
    assert vllm_engine.captured_graphs(128) == 35 + 19
    assert vllm_engine.captured_graphs(256) == vllm_engine.captured_graphs(1024) == 51 + 35
    assert vllm_engine.captured_graphs(8) == 5 + 4  # 1, 2, 4, 8, 16 and 1, 2, 4, 8


def test_engine_shapes_colocate_is_trls_server_is_vllms_or_the_flags():
    colocate = planned(
        "model=qwen7b",
        "topology=1x8",
        "vllm=colocate",
        "trainer.per_device_train_batch_size=8",
        "trainer.steps_per_generation=2",
    ).inputs
    assert (colocate.vllm_batched_tokens, colocate.vllm_max_seqs) == (4096, 8 * 1 * 2)  # TRL 1.16's LLM(...)
    big = planned("model=qwen7b", "topology=1x8", "vllm=server").inputs
    small = planned("model=qwen7b", "topology=1x8", "vllm=server", "topology.gpu_memory_gib=48").inputs
    assert (big.vllm_batched_tokens, big.vllm_max_seqs) == (8192, 1024)
    assert (small.vllm_batched_tokens, small.vllm_max_seqs) == (2048, 256)
    flags = planned(
        "model=qwen7b", "topology=1x8", "vllm=server", "vllm.max_num_seqs=64", "vllm.max_num_batched_tokens=1024"
    ).inputs
    assert (flags.vllm_batched_tokens, flags.vllm_max_seqs) == (1024, 64)
    smaller_profile = vllm_engine.estimate(flags, server=True).components["profile_activations"]
    assert smaller_profile < vllm_engine.estimate(big, server=True).components["profile_activations"]


def test_fp8_kv_cache_doubles_the_tokens_and_a_fixed_kv_cache_ignores_the_budget():
    base = planned("model=qwen7b", "topology=1x8", "vllm=server").inputs
    fp8 = planned("model=qwen7b", "topology=1x8", "vllm=server", "vllm.kv_cache_dtype=fp8").inputs
    assert vllm_engine.kv_bytes_per_token(fp8) * 2 == vllm_engine.kv_bytes_per_token(base)
    e, e8 = vllm_engine.estimate(base, server=True), vllm_engine.estimate(fp8, server=True)
    assert e8.kv_tokens == pytest.approx(2 * e.kv_tokens, rel=1e-4)  # in whole blocks, as vLLM counts them
    fixed = planned("model=qwen7b", "topology=1x8", "vllm=server", f"vllm.kv_cache_memory_bytes={10 * GIB}").inputs
    engine = vllm_engine.estimate(fixed, server=True)
    assert engine.components["kv_cache"] == 10 * GIB and engine.peak < 0.5 * engine.budget
    too_big = planned("model=qwen7b", "topology=1x8", "vllm=server", f"vllm.kv_cache_memory_bytes={75 * GIB}")
    assert not too_big.memory.fits  # not bounded by gpu_memory_utilization, still by the GPU


def test_a_colocated_engine_that_cannot_start_is_refused_with_the_util_that_starts():
    """TRL starts the colocated engine after loading the policy: vLLM needs util x capacity free then."""
    overrides = ("model=qwen1.5b", "topology=1x8", "topology.gpu_memory_gib=16", "vllm=colocate", "peft=lora")
    p = planned(*overrides, "vllm.gpu_memory_utilization=0.9")
    notes = " ".join(p.memory.errors)
    assert not p.memory.fits and "vLLM cannot start" in notes
    resident = memory.resident_at_engine_start(p.inputs, memory.estimate_train(p.inputs)) / GIB
    starts = math.floor(100 * (1 - resident / 16)) / 100 - 0.01  # what is free when it starts, one point of margin
    assert f"holds {resident:.2f} GiB" in notes and f"gpu_memory_utilization <= {starts:.2f} starts" in notes
    best = p.memory.suggestions[0]
    assert best["key"] == "vllm.gpu_memory_utilization" and best["fits"] and best["value"] <= 0.75
    assert planned(*overrides, f"vllm.gpu_memory_utilization={best['value']}").memory.fits


def test_sleep_mode_keeps_graphs_and_non_torch_and_the_plan_says_when_it_is_not_needed():
    awake = planned("model=qwen1.5b", "topology=1x8", "vllm=colocate")
    asleep = planned("model=qwen1.5b", "topology=1x8", "vllm=colocate", "vllm.enable_sleep_mode=true")
    engine = vllm_engine.estimate(asleep.inputs, server=False)
    saved = awake.memory.train["phases_gib"]["train"] - asleep.memory.train["phases_gib"]["train"]
    residual = vllm_engine.residual_asleep(engine) / GIB
    assert saved == pytest.approx(engine.peak / GIB - residual, rel=0.01)
    assert residual == pytest.approx((engine.components["cuda_graphs"] + engine.components["non_torch"]) / GIB)
    assert any("fits without vllm.enable_sleep_mode" in n for n in asleep.memory.notes)
    assert not any("fits without vllm.enable_sleep_mode" in n for n in awake.memory.notes)


def test_server_weight_sync_buffers_on_both_ends():
    p = planned("model=qwen7b", "topology=1x8", "vllm=server")
    assert p.memory.train["components_gib"]["weight_sync_buffers"] == 2.0
    assert "weight_sync" in p.memory.train["phases_gib"]
    assert p.memory.vllm["components_gib"]["weight_sync_buffers"] == 2.0
    engine = p.memory.vllm_engine
    assert engine["kv_tokens"] > 0 and engine["max_num_seqs"] == 1024 and engine["graphs_inside_budget"]
    assert any("maximum concurrency" in n for n in p.memory.vllm["notes"])


def test_server_flags_are_refused_where_there_is_no_server():
    from tests.helpers import problems

    found = {p.key for p in problems("vllm=colocate", "vllm.max_num_seqs=8", "vllm.kv_cache_dtype=fp8")}
    assert {"vllm.max_num_seqs", "vllm.kv_cache_dtype"} <= found
