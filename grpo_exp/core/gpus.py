"""The GPUs this process may use: how many, which card, how much memory. NVML first (no torch: the plan's
start-up stays cheap), else `torch.cuda.mem_get_info` where a driver is present but NVML's library is not;
CUDA_VISIBLE_DEVICES narrows both. A CPU machine answers with no GPUs at no cost: without NVIDIA's driver (its device
node, its /proc entry) neither is imported.
"""

import os
from dataclasses import dataclass

from grpo_exp import GIB, visible_devices


@dataclass(frozen=True)
class Card:
    name: str  # as the driver names it: "NVIDIA H200", "NVIDIA GeForce RTX 4090"
    memory_gib: float  # total memory of one card, GiB (2**30 bytes)


def count() -> int:
    """CUDA GPUs this process may use: CUDA_VISIBLE_DEVICES's count where it is set, else NVML's."""
    visible = visible_devices()
    return len(visible) if visible is not None else len(_nvml() or [])


def detect() -> list[Card]:
    """One Card per visible GPU, in CUDA's order; [] without a GPU."""
    cards = _nvml()
    if cards is None:  # torch.cuda sees only the visible ones already
        return _torch() if _driver_present() else []
    visible = visible_devices()
    if visible is None:
        return cards
    indices = [int(v) for v in visible if v.strip().isdigit()]
    if len(indices) == len(visible) and all(i < len(cards) for i in indices):
        return [cards[i] for i in indices]
    return cards[: len(visible)]  # UUIDs or MIG names: the count is what CUDA_VISIBLE_DEVICES says


def same_card(named: str, detected: str) -> bool:
    """Whether a topology's `gpu_name` ("H100-80GB", "A100-40GB") names the detected card ("NVIDIA H100 80GB
    HBM3"): every word of the name, its letters and digits, appears in the driver's."""

    def words(text: str) -> list[str]:
        return "".join(c if c.isalnum() else " " for c in text.lower()).split()

    found = "".join(words(detected))
    return all(word in found for word in words(named) if word != "nvidia")


def _nvml() -> list[Card] | None:
    if not _driver_present():  # NVML has nothing to say; importing pynvml alone is 3% of a plan
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVIDIA driver or no NVML library
        return None
    try:
        cards = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            cards.append(Card(name, round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / GIB, 2)))
        return cards
    finally:
        pynvml.nvmlShutdown()


def _driver_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def _torch() -> list[Card]:
    """torch.cuda's view, where NVML is missing (a container without libnvidia-ml)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    cards = []
    for index in range(torch.cuda.device_count()):
        _, total = torch.cuda.mem_get_info(index)
        cards.append(Card(torch.cuda.get_device_name(index), round(total / GIB, 2)))
    return cards
