"""The calibration file: correction factors for the planner, fitted from measured runs, and the fit.

A file written by `grpo-exp calibrate` (results/calibrate.py) holds
`{"factors": {"states", "activations", "logits"[, "vllm_overhead"]}, "device", "stat", "runs": [...]}`; with
`preflight.calibration=<file>` the planner multiplies each group of its components (GROUPS) by its factor
on plans for the same kind of device (a CPU calibration says nothing about a GPU). GPU runs measured with NVML add
`"cuda_runtime_gib": {card: GiB}`: what a process on that card holds besides its tensors and its process group's
share (NVML's device memory less the allocator's reserve, less cuda_runtime.process_group_part), which the planner
then takes for that card in place of cuda_runtime.card_part.

Fit: the train phase's measured peak is

    measured = f_states * (model states + runtime) + f_activations * activations + f_logits * logits

by least squares over the runs (factors kept >= FLOOR, the others refitted when one is held there). Runs
across batch sizes and completion lengths separate the three: states do not change with them,
activations grow with batch x sequence, logits with batch x completion. A factor the runs cannot
separate (the same batch and lengths everywhere) stays 1.0, and so does the least varying one where the runs do not
outnumber the factors (three factors fit three runs exactly, whatever the truth).

Pure Python apart from numpy's least squares: no torch.
"""

import json
from collections.abc import Mapping
from pathlib import Path

from grpo_exp.core.gpus import same_card

# The planner's components in the groups a calibration file corrects: fit() fits a factor per group from
# measured runs; the planner multiplies each component of a group by its factor (memory.estimate_train).
GROUPS = {
    "states": (
        "weights",
        "gradients",
        "fp32_gradients",
        "optimizer",
        "reference_model",
        "zero1_full_gradients",
        "zero3_gather",
        "runtime",
        "autocast_weights",
        "deepspeed_buffers",
        "fsdp_buffers",
        "fsdp_full_tensor",
        "dequantized_weights",
    ),
    "activations": ("activations", "vision_activations"),
    "logits": ("logits",),
}
FLOOR = 0.05  # no component is fitted away entirely
# The vLLM engine's components around its weights and KV cache (planning/vllm_engine.py), corrected by one
# factor fitted from what vLLM logged at start-up (fit_ratio): "vllm_overhead" in a calibration file.
ENGINE = "vllm_overhead"
ENGINE_GROUP = ("profile_activations", "non_torch", "cuda_graphs")
# The host RAM of a GPU node's processes (host_memory.py's `runtime`: CUDA's libraries and host state, a typical
# figure), corrected by one factor fitted from the nodes' measured RSS (fit_ratio): "host_runtime". CPU runs need
# none: their node is their ranks' plans, which the groups above correct.
HOST = "host_runtime"
RUNTIME = "cuda_runtime_gib"


def load(path: str | Path) -> dict:
    """A calibration file (grpo-exp calibrate): its factors, the device and stat they came from."""
    data = json.loads(Path(path).expanduser().read_text())
    if not isinstance(data.get("factors"), dict):
        raise ValueError(f"{path} holds no 'factors' (write it with grpo-exp calibrate)")
    return data


def fit(samples: list[dict]) -> dict[str, float]:
    """samples: {'measured': GiB, 'states': GiB, 'activations': GiB, 'logits': GiB, 'other': GiB (not
    corrected: a colocated vLLM engine's share)}. Least squares on the groups that vary across
    samples (the others stay 1.0); a factor that comes out below the floor is held there and the
    rest solved again, so the fit stays a least-squares one."""
    import numpy as np

    factors = {g: 1.0 for g in GROUPS}
    free = [g for g in GROUPS if g == "states" or len({round(s[g], 6) for s in samples}) > 1]
    # As many factors as runs fit the runs exactly, whatever is true: fewer factors than runs are freed, states and
    # the groups that vary most across the runs
    free = free[:1] + sorted(free[1:], key=lambda g: -_spread(samples, g))[: max(0, len(samples) - 2)]
    while free:
        held = [g for g in GROUPS if g not in free]
        a = np.array([[s[g] for g in free] for s in samples])
        b = np.array([s["measured"] - s.get("other", 0.0) - sum(factors[g] * s[g] for g in held) for s in samples])
        solution, *_ = np.linalg.lstsq(a, b, rcond=None)
        low = [g for g, v in zip(free, solution, strict=True) if v < FLOOR]
        if not low:
            factors.update({g: float(v) for g, v in zip(free, solution, strict=True)})
            break
        for g in low:
            factors[g] = FLOOR
            free.remove(g)
    return factors


def _spread(samples: list[dict], group: str) -> float:
    """How much a group varies across the runs, relative to its mean."""
    values = [s[group] for s in samples]
    return (max(values) - min(values)) / max(sum(values) / len(values), 1e-9)


def fit_ratio(samples: list[dict]) -> float | None:
    """One factor from {'logged': GiB, 'planned': GiB} samples: the ratio of the sums (runs weigh by their size);
    None without samples. The engine's overhead (what vLLM's budget holds besides weights and KV cache, logged:
    the budget less vLLM's own weights and KV cache) and the host runtime (a node's measured RSS less the
    planned offloaded terms) are fitted so."""
    planned = sum(s["planned"] for s in samples)
    if not samples or planned <= 0:
        return None
    return max(FLOOR, sum(s["logged"] for s in samples) / planned)


def predict(sample: dict, factors: dict[str, float]) -> float:
    return sample.get("other", 0.0) + sum(factors.get(g, 1.0) * sample[g] for g in GROUPS)


def inputs_for(path: str | Path | None, device: str, card: str | None) -> dict:
    """The Inputs fields preflight.calibration sets: its factors, when fitted on this kind of device, and the CUDA
    runtime measured on this card (bytes; None where none was); none of either without a file."""
    data = load(path) if path else {}
    runtime = runtime_for(data.get(RUNTIME, {}), card)
    return {"calibration": factors_for(data, device), "card_runtime": None if runtime is None else runtime * 2**30}


def factors_for(data: dict | None, device: str) -> tuple:
    """A calibration file's factors (`data`: load's) as (group, factor) pairs, when they were fitted on this kind of
    device; () without a file."""
    if not data:
        return ()
    return tuple(sorted(data["factors"].items())) if data.get("device") == device else ()


def runtime_for(runtimes: Mapping[str, float], card: str | None) -> float | None:
    """The CUDA runtime measured on `card` (GiB), from a calibration file's RUNTIME table, matched by the card's
    words either way ("H200" and "NVIDIA H200"); None where none was measured on it."""
    named = [gib for name, gib in runtimes.items() if card and (same_card(card, name) or same_card(name, card))]
    return named[0] if named else None
