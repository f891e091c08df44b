"""Peak memory per phase, on every rank, aggregated over ranks."""

import pytest

from grpo_exp import GIB
from grpo_exp.training import phases, probes
from tests.helpers import run_fresh

MIB = 2**20


def test_spike_is_charged_to_the_innermost_phase():
    run_fresh("""
        memory = phases.PhaseMemory(probes.MemoryProbe())
        with memory.phase("train"):
            with memory.phase("reward"):
                spike = torch.ones(128 * MIB // 4)
                del spike
            small = torch.ones(MIB // 4)
        window = memory.take_window()
        assert window["reward"]["host_rss_max"] >= window["train"]["host_rss_max"] + 100 * MIB, window
        assert set(window) == {"train", "reward"}
        assert memory.take_window() == {}  # a window is reported once
    """)


def test_failed_phase_is_the_innermost_that_raised():
    memory = phases.PhaseMemory(probes.MemoryProbe())
    with pytest.raises(ValueError):
        with memory.phase("train"):
            with memory.phase("generate"):
                raise ValueError("boom")
    assert memory.failed_phase == "generate" and memory.stack == []


def test_aggregate_over_ranks():
    g = GIB
    windows = [
        {"train": {"host_rss_max": 1 * g}, "reward": {"host_rss_max": 1 * g}},
        {"train": {"host_rss_max": 3 * g}},
        {"train": {"host_rss_max": 2 * g, "alloc_retries": 5}},
    ]
    out = phases.aggregate(windows)
    assert out["memory/train/host_rss_max_gib"] == 3.0
    assert out["memory/train/host_rss_max_gib_mean"] == 2.0
    assert out["memory/train/host_rss_max_gib_min"] == 1.0
    assert out["memory/train/host_rss_max_gib_argmax_rank"] == 1
    assert out["memory/reward/host_rss_max_gib_argmax_rank"] == 0  # only rank 0 ran it
    assert out["memory/alloc_retries"] == 5


def test_run_peaks_keep_the_maximum_per_stat():
    peaks = {}
    phases.run_peaks({"memory/train/host_rss_max_gib": 1.0, "memory/train/host_rss_max_gib_mean": 9.0}, peaks)
    phases.run_peaks({"memory/generate/host_rss_max_gib": 2.0, "memory/alloc_retries": 3}, peaks)
    phases.run_peaks({"memory/train/host_rss_max_gib": 1.5}, peaks)
    assert peaks == {
        "memory/peak/train/host_rss_max_gib": 2.0,
        "memory/peak_phase/train/host_rss_max_gib": 1.5,
        "memory/peak_phase/generate/host_rss_max_gib": 2.0,
    }


def test_vllm_server_memory_is_its_own_role():
    peaks = {}
    phases.run_peaks({"memory/vllm/device_used_max_gib": 70.0, "memory/train/device_used_max_gib": 50.0}, peaks)
    assert {k: v for k, v in peaks.items() if k.startswith("memory/peak/")} == {
        "memory/peak/vllm/device_used_max_gib": 70.0,
        "memory/peak/train/device_used_max_gib": 50.0,
    }


def test_a_nodes_host_ram_is_its_ranks_rss_added_up():
    """node_rss_max: per phase, the fullest node's ranks' RSS peaks summed (the kernel's OOM killer sees the
    node, not a rank); none for the vLLM pseudo-phase."""
    g = GIB
    windows = [
        {"train": {"host_rss_max": 1 * g}, "vllm": {"device_used_max": 5 * g}},
        {"train": {"host_rss_max": 2 * g}},
        {"train": {"host_rss_max": 4 * g}},
    ]
    out = phases.aggregate(windows, nodes=[0, 0, 1])
    assert out["memory/train/node_rss_max_gib"] == 4.0  # node 1's one rank beats node 0's 1 + 2
    assert phases.aggregate(windows, nodes=[0, 0, 0])["memory/train/node_rss_max_gib"] == 7.0
    assert "memory/vllm/node_rss_max_gib" not in out and "memory/train/node_rss_max_gib" not in phases.aggregate(
        windows
    )
