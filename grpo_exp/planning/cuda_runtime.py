"""What a GPU training process holds besides its tensors (the plan's `runtime` on a GPU), from what the plan knows:
the card, whether CUDA loads its kernels lazily, and the process group. No torch import.

    runtime = stack(card) + LIBRARIES [+ EAGER_MODULES]                    the CUDA context and what a step loads
              [+ NCCL_COMMUNICATOR [+ DEEPSPEED_MODULES] + nccl_buffers]   a process group on NCCL

Sources. The H200 probe (scripts/cuda_runtime_probe.py; tests/fixtures/gpu/h200-2026-11-28/cuda-runtime.json: torch
2.11 + CUDA 13.0, NCCL 2.28.9, driver 580) measured each part in a fresh process as NVML's device memory less the
allocator's reserve; the H200 runs (tests/fixtures/gpu/) measured the whole term on real GRPO steps. What one GPU
cannot show (buffers for other ranks) comes from NCCL's source, named where it is used. `grpo-exp calibrate` replaces
the card's part (stack, libraries, module loading) by the figure measured on that card (calibration.py).
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from grpo_exp import GIB
from grpo_exp.core import gpus

KIB, MIB = 2**10, 2**20


@dataclass(frozen=True)
class Card:
    sms: int  # streaming multiprocessors (NVIDIA's data sheets)
    threads_per_sm: int  # resident threads per SM by compute capability (CUDA C++ Programming Guide's table)
    nvlink: bool  # ranks talk over NVLink / NVSwitch: NCCL opens many channels (nccl_buffers)


# Matched by name (core/gpus.same_card); the longest matching name wins ("H100 PCIe" over "H100", "A100" over "A10").
CARDS = {
    "B200": Card(148, 2048, True),
    "H200": Card(132, 2048, True),  # SMs and threads as torch reports them on the probed card
    "GH200": Card(132, 2048, True),
    "H100": Card(132, 2048, True),  # SXM; "H100-80GB" names it
    "H100 PCIe": Card(114, 2048, False),
    "H100 NVL": Card(132, 2048, True),
    "H20": Card(78, 2048, True),
    "A100": Card(108, 2048, True),
    "A800": Card(108, 2048, True),
    "V100": Card(80, 2048, True),
    "L40S": Card(142, 1536, False),
    "L40": Card(142, 1536, False),
    "RTX 6000 Ada": Card(142, 1536, False),
    "L4": Card(58, 1536, False),
    "A6000": Card(84, 1536, False),
    "A10G": Card(80, 1536, False),
    "A10": Card(72, 1536, False),
    "RTX 4090": Card(128, 1536, False),
    "RTX 3090": Card(82, 1536, False),
    "T4": Card(40, 1024, False),
}
MEASURED_CARD = "H200"  # a card the table does not name is planned as this one (a note says so)

# The driver reserves every resident thread's stack (cudaLimitStackSize, 1 KiB by default) in the context: raising it
# to 2 KiB added 0.258 GiB on the H200, exactly 132 SMs x 2048 threads x 1 KiB (the probe's stack_2k stage).
STACK_PER_THREAD = 1 * KIB
# The rest of the context and the kernels and cuBLAS workspaces a GRPO step loads: the H200 runs' runtime (NVML less
# reserved: 1.38-1.45 GiB over six runs, dense and MoE) less the H200's stack. Lazily loaded kernels are the same
# machine code on any card of one architecture, so this part does not scale with the card.
LIBRARIES = 1.45 * GIB - 132 * 2048 * STACK_PER_THREAD
# Without lazy loading (a CUDA runtime before 11.7, or CUDA_MODULE_LOADING=EAGER) every kernel of every library loads
# at start: 1.07 GiB more for the same step on the H200 (the probe's eager stage against its train stage).
EAGER_MODULES = 1.07 * GIB
# A one-rank NCCL process group and one all-reduce: 0.55 GiB (the probe's nccl stage against its train stage).
NCCL_COMMUNICATOR = 0.55 * GIB
# DeepSpeed on one rank over NCCL held 0.91 GiB more than the same run without it (H200 runs f_q05_zero2 against
# a_q05_full); less the communicator, its own kernels and state.
DEEPSPEED_MODULES = 0.91 * GIB - NCCL_COMMUNICATOR
# With other ranks NCCL gives each channel's connections a buffer per protocol (NVIDIA/nccl src/init.cc:
# DEFAULT_LL_BUFFSIZE 512 KiB, DEFAULT_LL128_BUFFSIZE 4,915,200 B, DEFAULT_BUFFSIZE 4 MiB), for three connections
# per channel (the ring's peer, the tree's parent and child), on 32 channels over NVLink / NVSwitch and 2 over PCIe
# (the channel counts NCCL_DEBUG=INFO logs on 8-GPU NVSwitch and PCIe machines). Not measured here: one GPU has no
# peers. NVLink SHARP's buffers (NCCL_NVLS_ENABLE on NVSwitch systems) are not planned.
NCCL_CONNECTION = 512 * KIB + 4_915_200 + 4 * MIB
NCCL_CONNECTIONS_PER_CHANNEL = 3
NCCL_CHANNELS = {True: 32, False: 2}


def known(name: str | None) -> str | None:
    """The table's name for a card (the driver's name or a topology's gpu_name), None where the table has none."""
    named = [key for key in CARDS if gpus.same_card(key, name)] if name else []
    return max(named, key=len) if named else None


def card(name: str | None) -> tuple[str, Card]:
    """The table's name and numbers for a card; MEASURED_CARD's for a card the table does not name."""
    key = known(name) or MEASURED_CARD
    return key, CARDS[key]


def lazy_loading(cuda_version: tuple[int, int] | None, env: Mapping[str, str] = os.environ) -> bool:
    """Whether CUDA loads kernels as they are first used: from CUDA 11.7 on, unless CUDA_MODULE_LOADING=EAGER."""
    if env.get("CUDA_MODULE_LOADING", "").upper() == "EAGER":
        return False
    return cuda_version is None or cuda_version >= (11, 7)


def installed_cuda() -> tuple[int, int] | None:
    """The CUDA runtime the installed torch was built with, from its distribution's version ("2.11.0+cu130"), with no
    torch import; None when torch is absent, a CPU build, or its version names no CUDA (PyPI's Linux wheels: 12.x)."""
    from importlib import metadata

    try:
        local = metadata.version("torch").partition("+")[2]
    except metadata.PackageNotFoundError:
        return None
    if not (local.startswith("cu") and local[2:].isdigit() and len(local) >= 5):
        return None
    return int(local[2:-1]), int(local[-1])


def card_part(card_name: str | None, lazy: bool) -> float:
    """The context and what a step loads, in bytes: the card's stack reservation, the libraries, eager modules."""
    c = card(card_name)[1]
    return c.sms * c.threads_per_sm * STACK_PER_THREAD + LIBRARIES + (0.0 if lazy else EAGER_MODULES)


def process_group_part(world_size: int, nccl: bool, deepspeed: bool, card_name: str | None) -> float:
    """NCCL's communicator, DeepSpeed's modules and the buffers for the other ranks, in bytes (0 without NCCL)."""
    if not nccl:
        return 0.0
    held = NCCL_COMMUNICATOR + (DEEPSPEED_MODULES if deepspeed else 0.0)
    if world_size > 1:
        held += NCCL_CHANNELS[card(card_name)[1].nvlink] * NCCL_CONNECTIONS_PER_CHANNEL * NCCL_CONNECTION
    return held


def describe(card_name: str | None, lazy: bool, measured: float | None, group: float, world_size: int) -> str:
    """Where the plan's CUDA runtime comes from, for the plan's notes (`group`: process_group_part's bytes)."""
    key, c = card(card_name)
    if measured is not None:
        part = f"{measured / GIB:.2f} GiB as measured on {card_name} (preflight.calibration)"
    else:
        who = (
            f"{key}: {c.sms} SMs x {c.threads_per_sm} threads"
            if known(card_name)
            else f"{card_name or 'no card named'}, not in CARDS: as the {key}"
        )
        loading = (
            "kernels loaded lazily"
            if lazy
            else "every kernel loaded at start (CUDA_MODULE_LOADING=EAGER or CUDA < 11.7)"
        )
        part = f"{card_part(card_name, lazy) / GIB:.2f} GiB ({who}; {loading})"
    pg = f" + NCCL {group / GIB:.2f} GiB ({world_size} rank{'s' * (world_size > 1)})" if group else ""
    return f"CUDA runtime per training GPU: context and kernels {part}{pg} (planning/cuda_runtime.py)"
