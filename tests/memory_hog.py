"""Misbehaving reward functions for the failure tests: one that asks for too much memory, one that hangs."""

import os


def memory_hog(completions, gib: float = 8.0, only_rank: int | None = None, **kwargs) -> list[float]:
    import torch

    if only_rank is None or int(os.environ.get("RANK", "0")) == only_rank:
        torch.empty(int(gib * 2**30), dtype=torch.uint8)  # address space only: fails under RLIMIT_DATA
    return [0.0] * len(completions)


def stuck(completions, seconds: float = 600.0, only_rank: int | None = None, **kwargs) -> list[float]:
    """A reward function that never returns in time: drives the stall-watchdog test."""
    import time

    if only_rank is None or int(os.environ.get("RANK", "0")) == only_rank:
        time.sleep(seconds)
    return [0.0] * len(completions)
