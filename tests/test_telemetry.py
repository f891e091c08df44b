"""Memory telemetry: real probes on this process, attribution to phases, rank aggregation, OOM
classification. CUDA/NVML paths run only on a GPU machine and are skipped here, never faked."""

import pytest
import torch

from grpo_exp.core import outcome
from grpo_exp.training import telemetry

MIB = 2**20


def run_fresh(body: str) -> None:
    """Run a VmHWM test in a fresh process: after other tests (the planner-fidelity ones build GB-sized
    models) freed but still-resident heap absorbs a spike of tens of MiB without raising the RSS peak."""
    import subprocess
    import sys
    import textwrap

    prelude = """
import torch
from grpo_exp.training import telemetry
MIB = 2**20
if not telemetry.MemoryProbe().host_peak_resettable:
    raise SystemExit(77)
"""
    result = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(body)], capture_output=True, text=True)
    if result.returncode == 77:
        pytest.skip("this kernel/sandbox does not allow resetting VmHWM")
    assert result.returncode == 0, result.stderr[-2000:]


def test_probe_reads_real_host_peak_and_resets_it():
    run_fresh("""
        probe = telemetry.MemoryProbe()
        probe.reset()
        before = probe.read()["host_rss_max"]
        spike = torch.ones(64 * MIB // 4)  # 64 MiB, touched
        del spike
        assert probe.read()["host_rss_max"] >= before + 60 * MIB
        probe.reset()
        assert probe.read()["host_rss_max"] < before + 30 * MIB  # the freed spike is forgotten
    """)


def test_spike_is_charged_to_the_innermost_phase():
    run_fresh("""
        phases = telemetry.PhaseMemory(telemetry.MemoryProbe())
        with phases.phase("train"):
            with phases.phase("reward"):
                spike = torch.ones(128 * MIB // 4)
                del spike
            small = torch.ones(MIB // 4)
        window = phases.take_window()
        assert window["reward"]["host_rss_max"] >= window["train"]["host_rss_max"] + 100 * MIB, window
        assert set(window) == {"train", "reward"}
        assert phases.take_window() == {}  # a window is reported once
    """)


def test_the_installed_trl_has_every_method_telemetry_hooks():
    """An upgrade that renames one of GRPOTrainer's private methods fails here, naming it, not inside every worker."""
    from trl import GRPOTrainer

    assert telemetry.missing_hooks(GRPOTrainer) == []

    class Renamed:  # what a renamed method looks like to the check
        training_step = _prepare_inputs = _calculate_rewards = _get_per_token_logps_and_entropies = staticmethod(
            lambda: None
        )

    assert telemetry.missing_hooks(Renamed) == ["_generate"]


def test_failed_phase_is_the_innermost_that_raised():
    phases = telemetry.PhaseMemory(telemetry.MemoryProbe())
    with pytest.raises(ValueError):
        with phases.phase("train"):
            with phases.phase("generate"):
                raise ValueError("boom")
    assert phases.failed_phase == "generate" and phases.stack == []


def test_aggregate_over_ranks():
    g = telemetry.GIB
    windows = [
        {"train": {"host_rss_max": 1 * g}, "reward": {"host_rss_max": 1 * g}},
        {"train": {"host_rss_max": 3 * g}},
        {"train": {"host_rss_max": 2 * g, "alloc_retries": 5}},
    ]
    out = telemetry.aggregate(windows)
    assert out["memory/train/host_rss_max_gib"] == 3.0
    assert out["memory/train/host_rss_max_gib_mean"] == 2.0
    assert out["memory/train/host_rss_max_gib_min"] == 1.0
    assert out["memory/train/host_rss_max_gib_argmax_rank"] == 1
    assert out["memory/reward/host_rss_max_gib_argmax_rank"] == 0  # only rank 0 ran it
    assert out["memory/alloc_retries"] == 5


def test_run_peaks_keep_the_maximum_per_stat():
    peaks = {}
    telemetry.run_peaks({"memory/train/host_rss_max_gib": 1.0, "memory/train/host_rss_max_gib_mean": 9.0}, peaks)
    telemetry.run_peaks({"memory/generate/host_rss_max_gib": 2.0, "memory/alloc_retries": 3}, peaks)
    telemetry.run_peaks({"memory/train/host_rss_max_gib": 1.5}, peaks)
    assert peaks == {
        "memory/peak/train/host_rss_max_gib": 2.0,
        "memory/peak_phase/train/host_rss_max_gib": 1.5,
        "memory/peak_phase/generate/host_rss_max_gib": 2.0,
    }


def test_vllm_server_memory_is_its_own_role():
    peaks = {}
    telemetry.run_peaks({"memory/vllm/device_used_max_gib": 70.0, "memory/train/device_used_max_gib": 50.0}, peaks)
    assert {k: v for k, v in peaks.items() if k.startswith("memory/peak/")} == {
        "memory/peak/vllm/device_used_max_gib": 70.0,
        "memory/peak/train/device_used_max_gib": 50.0,
    }


def test_no_vllm_probe_without_nvml_or_reserved_gpus(monkeypatch):
    monkeypatch.delenv("GRPO_EXP_VLLM_GPUS", raising=False)
    assert telemetry.VllmServerProbe.from_env() is None
    if not torch.cuda.is_available():  # no NVIDIA driver: NVML cannot open the device
        monkeypatch.setenv("GRPO_EXP_VLLM_GPUS", "0")
        assert telemetry.VllmServerProbe.from_env() is None


@pytest.mark.parametrize(
    "exc,kind,requested",
    [
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes."),
            "host",
            8589934592,
        ),
        (MemoryError(), "host", None),
        (
            torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 1.42 GiB. GPU 7 has a total capacity of 79.35 GiB"
            ),
            "cuda",
            int(1.42 * 2**30),
        ),
    ],
)
def test_oom_details(exc, kind, requested):
    assert outcome.oom_details(exc) == {"kind": kind, "requested_bytes": requested}


def test_other_errors_are_not_oom():
    assert outcome.oom_details(RuntimeError("Connection closed by peer")) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_and_nvml_stats_on_a_gpu():
    probe = telemetry.MemoryProbe()
    probe.reset()
    x = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    stats = probe.read()
    assert stats["alloc_max"] >= 256 * MIB and stats["reserved_max"] >= stats["alloc_max"]
    assert stats["active_max"] >= 256 * MIB
    if probe._nvml is not None:
        assert stats["device_used_max"] >= stats["reserved_max"]
    del x


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_vllm_server_probe_reads_nvml_on_a_gpu(monkeypatch):
    monkeypatch.setenv("GRPO_EXP_VLLM_GPUS", "0")
    probe = telemetry.VllmServerProbe.from_env()
    assert probe is not None and probe.read()["device_used_max"] > 0
