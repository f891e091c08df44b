"""Reward functions for the tests: one that asks for too much memory, one that hangs, one that paces the
steps, one that records the columns it gets."""

import os


def memory_hog(
    completions,
    prompts=None,
    gib: float = 8.0,
    gib_per_unit: float | None = None,
    only_rank: int | None = None,
    touch: bool = False,
    **kwargs,
) -> list[float]:
    """Asks for `gib`, or `gib_per_unit` x batch x num_generations (a unit per completion, times
    completions per prompt), so a grid over batch and num_generations OOMs exactly where wanted. `touch`
    writes every page: resident memory, which the kernel's OOM killer counts (the default is address space)."""
    import torch

    if gib_per_unit is not None:
        generations = len(completions) // max(1, len({str(p) for p in prompts or []}))
        gib = gib_per_unit * len(completions) * generations
    if only_rank is None or int(os.environ.get("RANK", "0")) == only_rank:
        hog = torch.empty(int(gib * 2**30), dtype=torch.uint8)  # address space only: fails under RLIMIT_DATA
        if touch:
            hog.fill_(1)
    return [0.0] * len(completions)


def stuck(completions, seconds: float = 600.0, only_rank: int | None = None, **kwargs) -> list[float]:
    """A reward function that never returns in time: drives the stall-watchdog test."""
    import time

    if only_rank is None or int(os.environ.get("RANK", "0")) == only_rank:
        time.sleep(seconds)
    return [0.0] * len(completions)


def paced(completions, seconds: float = 0.4, only_rank: int | None = None, **kwargs) -> list[float]:
    """Takes `seconds` per reward call (one per step here): bounds the step rate whatever the CPU, so a
    test can know how many steps fit in a time window. `only_rank`: that global rank only (the others then wait
    for it in the collective that gathers the rewards)."""
    import os
    import time

    if only_rank is None or int(os.environ.get("RANK", "0")) == only_rank:
        time.sleep(seconds)
    return [0.0] * len(completions)


_calls = 0


def fail_on_rank(completions, rank: int = 1, at_call: int = 4, **kwargs) -> list[float]:
    """Raises on global rank `rank` at its `at_call`-th call (one per step here), as a user's reward with a bug the
    data reaches late; every other rank rewards 0."""
    import os

    global _calls
    _calls += 1
    if int(os.environ.get("RANK", "0")) == rank and _calls >= at_call:
        raise RuntimeError(f"reward failed on purpose on rank {rank} at call {_calls}")
    return [0.0] * len(completions)


def record_columns(completions, level, out: str | None = None, **kwargs) -> list[float]:
    """Takes the dataset's extra column `level` (TRL passes every column by name) and appends what it
    received to `out` as a JSON line: proves extra columns reach reward functions."""
    import json

    if out is not None:
        with open(out, "a") as f:
            f.write(json.dumps({"level": list(level), "columns": sorted(kwargs)}) + "\n")
    return [0.0] * len(completions)
