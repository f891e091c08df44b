"""A reward function that asks for a lot of memory: drives the OOM tests into the `reward` phase."""

import os


def memory_hog(completions, gib: float = 8.0, only_rank: int | None = None, **kwargs) -> list[float]:
    import torch

    if only_rank is None or int(os.environ.get("RANK", "0")) == only_rank:
        torch.empty(int(gib * 2**30), dtype=torch.uint8)  # address space only: fails under RLIMIT_DATA
    return [0.0] * len(completions)
