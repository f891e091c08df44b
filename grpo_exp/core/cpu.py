"""This machine's CPU: the instruction sets libraries choose their kernels by, read from Linux's /proc/cpuinfo
without torch (the plan's start-up stays cheap)."""

import functools
from pathlib import Path


@functools.cache
def flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (avx2, avx512f, avx512_bf16, amx_tile, ...); none elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def avx512_bf16() -> bool:
    """AVX-512 BF16, as torch.cpu._is_avx512_bf16_supported() reads it from CPUID: where the CPU has it (AMX's CPUs
    too), vLLM's CPU build runs its accelerated GDN kernel and keeps the SSM state in fp32 for it."""
    return "avx512_bf16" in flags()
