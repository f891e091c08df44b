"""The CUDA runtime term (planning/cuda_runtime.py) from what the plan knows: the card, how CUDA loads its kernels and
the process group, each figure held to its source (the H200 probe, tests/fixtures/gpu/h200-2026-11-28/
cuda-runtime.json, and the H200 runs), and `grpo-exp calibrate` refining it per card. No GPU is needed."""

import json
from importlib import metadata

import pytest

from grpo_exp import GIB
from grpo_exp.core import metrics, rundir
from grpo_exp.planning import cuda_runtime
from tests.helpers import FIXTURES, planned

PROBE = json.loads((FIXTURES / "gpu" / "h200-2026-11-28" / "cuda-runtime.json").read_text())
STAGES = {name: stage["runtime_gib"] for name, stage in PROBE["stages"].items()}
H200 = ("topology.gpu_name=H200", "topology.gpu_memory_gib=139.8", "vllm=off")


def runtime_gib(*overrides: str) -> float:
    return planned(*overrides).memory.train["components_gib"]["runtime"]


def test_the_stack_reservation_is_every_resident_thread_s_kib_on_the_probed_card():
    card = PROBE["card"]
    assert (cuda_runtime.CARDS["H200"].sms, cuda_runtime.CARDS["H200"].threads_per_sm) == (
        card["sms"],
        card["threads_per_sm"],
    )
    one_more_kib = STAGES["stack_2k"] - STAGES["context"]
    assert one_more_kib == pytest.approx(
        card["sms"] * card["threads_per_sm"] * cuda_runtime.STACK_PER_THREAD / GIB, rel=0.02
    )


def test_the_measured_constants_are_the_probe_s():
    assert cuda_runtime.EAGER_MODULES / GIB == pytest.approx(STAGES["eager"] - STAGES["train"], abs=0.01)
    assert cuda_runtime.NCCL_COMMUNICATOR / GIB == pytest.approx(STAGES["nccl"] - STAGES["train"], abs=0.01)


@pytest.mark.parametrize(
    "record", ["h200-2026-11-26/a_q05_full", "h200-2026-11-26/f_q05_zero2", "h200-2026-11-28/a_q05_full",
               "h200-2026-11-28/g_moe_full", "h200-2026-11-28/h_moe_eager"],
)  # fmt: skip
def test_the_h200_runs_hold_the_planned_runtime(record):
    """NVML's device memory less the allocator's reserve at the train peak, on real GRPO steps, dense and MoE."""
    summary = rundir.read_summary(FIXTURES / "gpu" / record)
    held = summary[metrics.peak("train", "device_used_max")] - summary[metrics.peak("train", "reserved_max")]
    deepspeed = record.endswith("zero2")
    plan = cuda_runtime.card_part("NVIDIA H200", lazy=True) + cuda_runtime.process_group_part(
        1, deepspeed, deepspeed, "H200"
    )
    assert held == pytest.approx(plan / GIB, rel=0.07)


@pytest.mark.parametrize(
    "name, key",
    [("NVIDIA H200", "H200"), ("NVIDIA H20", "H20"), ("H100-80GB", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"),
     ("NVIDIA A10", "A10"), ("A100-40GB", "A100"), ("NVIDIA A10G", "A10G"), ("NVIDIA L40S", "L40S"),
     ("NVIDIA L4", "L4"), ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA Q9000", "H200"), (None, "H200")],
)  # fmt: skip
def test_a_card_is_its_longest_matching_name(name, key):
    assert cuda_runtime.card(name)[0] == key


def test_lazy_loading_follows_the_cuda_runtime_and_the_environment(monkeypatch):
    assert cuda_runtime.lazy_loading((11, 7), {}) and cuda_runtime.lazy_loading(None, {})
    assert not cuda_runtime.lazy_loading((11, 6), {})
    assert not cuda_runtime.lazy_loading((13, 0), {"CUDA_MODULE_LOADING": "EAGER"})
    for version, cuda in (("2.11.0+cu130", (13, 0)), ("2.1.0+cu118", (11, 8)), ("2.13.0+cpu", None), ("2.5.1", None)):
        monkeypatch.setattr(metadata, "version", lambda name, v=version: v)
        assert cuda_runtime.installed_cuda() == cuda


def test_the_runtime_follows_the_card_and_the_process_group():
    h200 = runtime_gib("topology=1x1", *H200)
    assert h200 == pytest.approx(1.45, abs=0.005)  # the records' figure on one rank without NCCL
    rtx = runtime_gib("topology=1x1", "topology.gpu_name=RTX-4090", "topology.gpu_memory_gib=24", "vllm=off")
    assert rtx == pytest.approx(h200 - (132 * 2048 - 128 * 1536) * 1024 / GIB)  # a smaller card reserves less stack
    one_rank_zero2 = runtime_gib("topology=1x1", *H200, "deepspeed=zero2")
    assert one_rank_zero2 - h200 == pytest.approx(0.91, abs=0.005)  # the records' DeepSpeed on one rank
    eight = runtime_gib("topology=1x8", *H200, "deepspeed=zero2")
    buffers = 32 * 3 * cuda_runtime.NCCL_CONNECTION / GIB  # NVLink: 32 channels of three connections
    assert eight - one_rank_zero2 == pytest.approx(buffers) and 0.8 < buffers < 0.9
    pcie = runtime_gib(
        "topology=1x8", "topology.gpu_name=L40S", "topology.gpu_memory_gib=44.4", "vllm=off", "deepspeed=zero2"
    )
    assert pcie < eight  # two channels over PCIe


def test_the_plan_says_where_its_runtime_comes_from():
    notes = " ".join(planned("topology=1x8", *H200, "deepspeed=zero2").memory.notes)
    assert "H200: 132 SMs x 2048 threads; kernels loaded lazily" in notes and "NCCL 1.77 GiB (8 ranks)" in notes
    notes = " ".join(planned("topology=1x1", "topology.gpu_name=Q9000", "topology.gpu_memory_gib=48").memory.notes)
    assert "Q9000, not in CARDS: as the H200" in notes


def test_calibrate_measures_the_card_s_runtime_and_its_plans_take_it(tmp_path):
    from grpo_exp.results import calibrate

    result = calibrate.calibrate([str(FIXTURES / "gpu" / "h200-2026-11-28")], tmp_path / "calibration.json")
    assert len(result["runs"]) == 3  # the OOM run is not calibrated: its peak is the card's limit
    measured = result["cuda_runtime_gib"]["NVIDIA H200"]
    assert 1.35 < measured < 1.46
    only_runtime = tmp_path / "runtime.json"
    only_runtime.write_text(json.dumps({"factors": {}, "device": "cuda", "cuda_runtime_gib": {"NVIDIA H200": 1.2}}))
    calibrated = f"preflight.calibration={only_runtime}"
    assert runtime_gib("topology=1x1", *H200, calibrated) == pytest.approx(1.2)
    assert runtime_gib("topology=1x1", *H200, calibrated, "deepspeed=zero2") == pytest.approx(1.2 + 0.91, abs=0.005)
    other = ("topology=1x1", "topology.gpu_name=A100-80GB", "topology.gpu_memory_gib=80", "vllm=off")
    assert runtime_gib(*other, calibrated) == runtime_gib(*other)  # measured on another card: not this one's
    assert any("1.20 GiB as measured on H200" in n for n in planned("topology=1x1", *H200, calibrated).memory.notes)


def test_compare_s_calibrated_error_takes_the_card_s_measured_runtime(tmp_path):
    """`grpo-exp compare --calibration` predicts as the planner plans with the file: the measured runtime included."""
    from grpo_exp.results import compare

    runs = [r for r in compare.load_local(FIXTURES / "gpu" / "h200-2026-11-28") if r.path.name == "a_q05_full"]
    measured_only = tmp_path / "runtime.json"
    measured_only.write_text(json.dumps({"factors": {}, "device": "cuda", "cuda_runtime_gib": {"NVIDIA H200": 1.2}}))
    compare.apply_calibration(runs, measured_only)
    (run,) = runs
    peak = rundir.read_summary(run.path)[metrics.peak("train", "device_used_max")]
    lowered = (1.45 - 1.2) * 100 / peak  # the planned card part less the measured one, in % of the measured peak
    assert run.train_error_pct - run.calibrated_error_pct == pytest.approx(lowered, rel=0.01)
