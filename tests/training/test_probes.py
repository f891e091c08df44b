"""What memory a process holds, from every source the machine has."""

import pytest

from grpo_exp.core import gpus
from grpo_exp.training import probes
from tests.helpers import run_fresh

MIB = 2**20


def test_probe_reads_real_host_peak_and_resets_it():
    run_fresh("""
        probe = probes.MemoryProbe()
        probe.reset()
        before = probe.read()["host_rss_max"]
        spike = torch.ones(64 * MIB // 4)  # 64 MiB, touched
        del spike
        assert probe.read()["host_rss_max"] >= before + 60 * MIB
        probe.reset()
        assert probe.read()["host_rss_max"] < before + 30 * MIB  # the freed spike is forgotten
    """)


def test_no_vllm_probe_without_nvml_or_reserved_gpus(monkeypatch):
    monkeypatch.delenv("GRPO_EXP_VLLM_GPUS", raising=False)
    assert probes.VllmServerProbe.from_env() is None
    if not gpus.detect():  # no NVIDIA driver: NVML cannot open the device
        monkeypatch.setenv("GRPO_EXP_VLLM_GPUS", "0")
        assert probes.VllmServerProbe.from_env() is None


@pytest.mark.gpu
@pytest.mark.skipif(not gpus.detect(), reason="needs a CUDA GPU")
def test_cuda_and_nvml_stats_on_a_gpu():
    import torch

    probe = probes.MemoryProbe()
    probe.reset()
    x = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    stats = probe.read()
    assert stats["alloc_max"] >= 256 * MIB and stats["reserved_max"] >= stats["alloc_max"]
    assert stats["active_max"] >= 256 * MIB
    if probe._nvml is not None:
        assert stats["device_used_max"] >= stats["reserved_max"]
    del x


@pytest.mark.gpu
@pytest.mark.skipif(not gpus.detect(), reason="needs a CUDA GPU")
def test_vllm_server_probe_reads_nvml_on_a_gpu(monkeypatch):
    monkeypatch.setenv("GRPO_EXP_VLLM_GPUS", "0")
    probe = probes.VllmServerProbe.from_env()
    assert probe is not None and probe.read()["device_used_max"] > 0
