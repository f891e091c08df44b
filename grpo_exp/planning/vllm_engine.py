"""One vLLM engine GPU, planned on vLLM's own memory rules (vllm/v1/worker/gpu_worker.py): what it loads,
what its start-up profile takes, and the KV cache it sizes from what is left. Pure arithmetic over Inputs;
no vLLM import. Sources, the public start-up logs this was checked against and its error per vLLM
version: docs/memory-planner.md ("The vLLM engine").

    budget            gpu_memory_utilization x the GPU's total memory: everything below lives inside it
      weights         the model at 16 bits per TP shard (a pre-quantized checkpoint at its own bits)
      activations     the profile run: max_num_batched_tokens through the model, plus the sampler's
                      fp32 logits for min(max_num_seqs, max_num_batched_tokens) sequences
      non_torch       CUDA context share, cuBLAS workspace, NCCL for tensor parallelism
      cuda_graphs     since vLLM 0.21, estimated at start-up and taken inside the budget (before: on top);
                      none with enforce_eager
      kv_cache        the rest (or exactly kv_cache_memory_bytes, which ignores the budget)
    weight_sync_buffers  a server's NCCL weight-transfer buffers, allocated after start-up: outside

vLLM's CPU build (vllm/v1/worker/cpu_worker.py) has none of the profile: its KV cache is exactly
VLLM_CPU_KVCACHE_SPACE GiB (vllm.cpu_kv_cache_gib), allocated and touched at start-up, beside the weights (an
fp32 checkpoint served at bf16 by dtype=auto, as TRL builds a colocated engine) and the engine's own runtime;
all of it host RAM (estimate_cpu).

vLLM refuses to start when the KV cache is empty or cannot hold one max_model_len sequence (its
check_enough_kv_cache_memory); in colocate mode also when the GPU has less free memory at start-up than the
budget (its init_device check), which memory.py decides (it knows what the trainer already holds).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grpo_exp import GIB
from grpo_exp.planning import calibration, families

if TYPE_CHECKING:  # inputs.py reads this module's engine shapes
    from grpo_exp.planning.inputs import Inputs

# vLLM >= 0.21 estimates CUDA-graph memory while profiling and keeps it inside gpu_memory_utilization
# ("CUDA graph memory profiling is enabled (default since v0.21.0)"); this environment variable set to 0
# restores the old rule (graphs on top of the budget).
GRAPHS_INSIDE_SINCE = (0, 21)
GRAPHS_ESTIMATE_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
# Non-torch memory vLLM's profile finds on top of the weights: 0.01-0.26 GiB per GPU in the start-up logs of
# docs/memory-planner.md (one GPU and TP=2 alike); planned at their upper end.
NON_TORCH = 0.3 * GIB
# CUDA graphs: a shared pool, then per captured graph a small amount per decoder layer. Fitted to vLLM's own
# "Estimated CUDA graph memory" lines (Qwen2.5-7B, 54 graphs: 0.37 GiB; 0.31 captured).
GRAPH_POOL = 0.1 * GIB
GRAPH_PER_LAYER = 0.2 * 2**20  # bytes per decoder layer per captured graph
MAX_CAPTURE = 512  # vLLM caps the largest captured batch at min(2 x max_num_seqs, 512)
# What vLLM says when its budget leaves nothing for the KV cache (vllm/v1/core/kv_cache_utils.py)
NO_CACHE_BLOCKS = "'No available memory for the cache blocks'"
# The server's weight transfer (TRL 1.16: vLLM's packed NCCL broadcast): 2 buffers of 1 GiB on each end.
WEIGHT_SYNC_BUFFERS = 2 * GIB


def graphs_inside(version: tuple | None) -> bool:
    """Whether vLLM counts CUDA graphs inside gpu_memory_utilization: from 0.21 on, unless switched off."""
    if os.environ.get(GRAPHS_ESTIMATE_ENV) == "0":
        return False
    return version is None or tuple(version[:2]) >= GRAPHS_INSIDE_SINCE


def captured_graphs(max_num_seqs: int) -> int:
    """How many CUDA graphs vLLM captures by default (FULL_AND_PIECEWISE): piecewise ones for batch sizes
    1, 2, 4, every 8 to 256, every 16 above, up to min(2 x max_num_seqs, 512); full ones for those up to
    half of that (vLLM logs "PIECEWISE=51 (largest=512), FULL=35 (largest=256)")."""
    largest = min(2 * max_num_seqs, MAX_CAPTURE)
    sizes = [1, 2, 4, *range(8, 257, 8), *range(272, MAX_CAPTURE + 1, 16)]
    return sum(1 for s in sizes if s <= largest) + sum(1 for s in sizes if s <= largest // 2)


def _kv_element(x: Inputs) -> int:
    """Bytes of one KV cache element: fp8's one, else the served dtype's (kv_cache_dtype=auto)."""
    return 1 if x.vllm_kv_dtype.startswith("fp8") else x.vllm_dtype_bytes


def kv_bytes_per_layer_token(x: Inputs) -> float:
    """K and V of one attention layer for one token, per TP shard (AttentionSpec.page_size_bytes per token). With
    more TP ranks than KV heads vLLM replicates the heads: each rank keeps at least one (max(1, kv_heads // tp))."""
    return 2 * max(1, x.kv_heads // x.vllm_tp) * x.head_dim * _kv_element(x)


def kv_bytes_per_token(x: Inputs) -> float:
    """K and V of every layer for one token, per TP shard: what a dense model's logged KV cache tokens cost."""
    return x.layers * kv_bytes_per_layer_token(x)


def kv_cache(x: Inputs, kv_bytes: float) -> dict:
    """What vLLM makes of `kv_bytes` of KV cache for this model: {tokens (as it logs them), concurrency for one
    max_model_len request, request_bytes (what starting needs)}, by layer type (families.vllm_kv_cache)."""
    return families.vllm_kv_cache(x, kv_bytes, kv_bytes_per_layer_token(x), _kv_element(x))


def profile_activations(x: Inputs) -> float:
    """vLLM's profile run: max_num_batched_tokens through the model at 16 bits. Per token, the MLP's gate/up
    output and its activation (6 x intermediate bytes, per TP shard; a mixture of experts: the fused-MoE workspace,
    top-k x (gate_up, activation and down outputs), and its shared expert) and four copies of the hidden state
    (residual, norm, attention and projection outputs: 8 x hidden bytes); then the sampler's fp32 logits for
    the dummy batch of sequences. Checked against the logged "PyTorch activation peak memory" (docs)."""
    if x.experts:  # vllm/model_executor/layers/fused_moe: intermediate_cache1/2/3 of each token's top-k slots
        mlp = 2 * x.top_k * (3 * x.expert_width + x.hidden) / x.vllm_tp + 6 * x.shared_width / x.vllm_tp
    else:
        mlp = 6 * x.intermediate / x.vllm_tp
    per_token = mlp + 8 * x.hidden
    return x.vllm_batched_tokens * per_token + min(x.vllm_max_seqs, x.vllm_batched_tokens) * x.vocab * 4


def weights(x: Inputs) -> float:
    """The served model per TP shard: 16 bits, or a pre-quantized checkpoint's own bytes."""
    served = x.base_weight_bytes(dtype_bytes=2) if x.prequantized else x.params * 2
    return served / x.vllm_tp


@dataclass
class Engine:
    components: dict[str, float]  # bytes
    budget: float  # gpu_memory_utilization x capacity
    peak: float  # what the engine holds once started (buffers allocated after start-up included)
    kv_tokens: float
    concurrency: float  # max_model_len requests the KV cache holds at once (as vLLM logs it)
    request_bytes: float  # what one max_model_len request takes of the KV cache: vLLM starts only when it fits
    starts: bool  # vLLM's own start-up checks pass: a KV cache that holds one max_model_len sequence
    needs: float  # the least it starts with: all but the KV cache, plus one max_model_len request's KV cache
    notes: list[str] = field(default_factory=list)


def estimate(x: Inputs, server: bool) -> Engine:
    """One engine GPU of `x` (server: a `vllm serve` GPU, with its weight-transfer buffers); on CPU ranks
    the CPU build's engine (estimate_cpu)."""
    if x.device == "cpu":
        return estimate_cpu(x, server)
    budget = x.vllm_util * x.capacity
    c = {
        "weights": weights(x),
        "profile_activations": profile_activations(x),
        "non_torch": NON_TORCH,
        "cuda_graphs": 0.0
        if x.vllm_eager
        else GRAPH_POOL + GRAPH_PER_LAYER * x.layers * captured_graphs(x.vllm_max_seqs),
    }
    overhead = dict(x.calibration).get(calibration.ENGINE, 1.0)  # preflight.calibration, from vLLM's own logs
    for part in calibration.ENGINE_GROUP:
        c[part] *= overhead
    inside = graphs_inside(x.vllm_version)
    if x.vllm_kv_memory:  # --kv-cache-memory: the KV cache is what was asked, the budget is not consulted
        c["kv_cache"] = float(x.vllm_kv_memory)
        used = sum(c.values())
    else:
        taken = sum(v for k, v in c.items() if k != "cuda_graphs" or inside)
        c["kv_cache"] = max(0.0, budget - taken)
        used = budget + (0.0 if inside else c["cuda_graphs"])
    if server and x.weight_sync == "nccl":
        c["weight_sync_buffers"] = WEIGHT_SYNC_BUFFERS
        used += WEIGHT_SYNC_BUFFERS
    kv = kv_cache(x, c["kv_cache"])
    needs = _least_to_start(c, kv)
    notes = []
    if c["weights"] >= budget and not x.vllm_kv_memory:
        fails = "CUDA out of memory as it loads them" if c["weights"] > x.capacity else NO_CACHE_BLOCKS
        notes.append(
            f"its weights alone take {c['weights'] / GIB:.2f} GiB per GPU at tensor_parallel_size={x.vllm_tp}, "
            f"over gpu_memory_utilization x capacity = {budget / GIB:.2f} GiB (vLLM: {fails})"
        )
    elif c["kv_cache"] <= 0:
        notes.append(f"no memory left for the KV cache within gpu_memory_utilization (vLLM: {NO_CACHE_BLOCKS})")
    elif c["kv_cache"] < kv["request_bytes"]:
        notes.append(
            f"max_model_length {x.vllm_max_len} needs {kv['request_bytes'] / GIB:.2f} GiB of KV cache"
            f"{_by_layer_type(x)}; only {c['kv_cache'] / GIB:.2f} GiB is left (vLLM refuses to start)"
        )
    else:
        notes.append(
            f"KV cache: {kv['tokens']:,} tokens, {kv_bytes_per_token(x) / 1024:.0f} KiB each; maximum concurrency "
            f"{kv['concurrency']:.2f}x for "
            f"{x.vllm_max_len:,} tokens per request (as vLLM logs it{_by_layer_type(x)}), "
            f"~{kv['concurrency'] * x.vllm_max_len / (x.prompt + x.completion):.0f} sequences of prompt + "
            "completion at once"
        )
    starts = c["kv_cache"] > 0 and c["kv_cache"] >= kv["request_bytes"]
    return Engine(c, budget, used, kv["tokens"], kv["concurrency"], kv["request_bytes"], starts, needs, notes)


def _least_to_start(components: dict[str, float], kv: dict) -> float:
    """Engine.needs: all the engine holds but its KV cache, plus one max_model_len request's KV cache."""
    return sum(v for k, v in components.items() if k != "kv_cache") + kv["request_bytes"]


def _by_layer_type(x: Inputs) -> str:
    """How a model with sliding or state layers takes its KV cache per request, for the engine's notes."""
    parts = [f"{x.full_layers} full-attention layers at every token"] if x.sliding_layers or x.linear_layers else []
    if x.sliding_layers:
        parts.append(f"{x.sliding_layers} sliding layers at their {x.sliding_window}-token window")
    if x.linear_layers:
        pages = "two pages each (prefix caching)" if x.vllm_prefix_caching else "one page each"
        parts.append(f"{x.linear_layers} state layers at {pages}")
    return ": " + ", ".join(parts) if parts else ""


# The CPU engine's own resident memory beyond its weights and KV cache, measured with vllm-cpu 0.31 on the tiny
# model (benchmarks/vllm_cpu_memory.py): colocated, what the engine adds to a training process's RSS (vLLM's
# modules, scheduler and sampler); a server, its API server and engine core processes together.
CPU_COLOCATED_RUNTIME = 0.15 * GIB
CPU_SERVER_RUNTIME = 2.3 * GIB


def estimate_cpu(x: Inputs, server: bool) -> Engine:
    """vLLM's CPU build: weights at the served dtype, the KV cache VLLM_CPU_KVCACHE_SPACE sets, its runtime.
    It starts when that KV cache holds one max_model_len sequence."""
    c = {
        "weights": x.params * x.vllm_dtype_bytes / x.vllm_tp,
        "kv_cache": x.vllm_cpu_kv_bytes,
        "runtime": CPU_SERVER_RUNTIME if server else CPU_COLOCATED_RUNTIME,
    }
    kv = kv_cache(x, c["kv_cache"])
    peak = sum(c.values())
    starts = c["kv_cache"] >= kv["request_bytes"]
    needs = _least_to_start(c, kv)
    if starts:
        notes = [
            f"CPU KV cache: {kv['tokens']:,} tokens, {kv_bytes_per_token(x) / 1024:.2f} KiB each "
            f"(vllm.cpu_kv_cache_gib={x.vllm_cpu_kv_bytes / GIB:g}); maximum concurrency {kv['concurrency']:.2f}x "
            f"for {x.vllm_max_len:,} tokens per request (as vLLM logs it"
            f"{_by_layer_type(x)})"
        ]
    else:
        notes = [
            f"max_model_length {x.vllm_max_len} needs {kv['request_bytes'] / GIB:.2f} GiB of KV cache"
            f"{_by_layer_type(x)}; vllm.cpu_kv_cache_gib gives {x.vllm_cpu_kv_bytes / GIB:g} (vLLM refuses to start)"
        ]
    return Engine(c, peak, peak, kv["tokens"], kv["concurrency"], kv["request_bytes"], starts, needs, notes)


def residual_asleep(engine: Engine) -> float:
    """What a sleeping engine keeps (TRL sleeps at level 2: weights and KV cache released). The CUDA-graph
    pools, non-torch memory and the CUDA context stay (vLLM's sleep mode frees only its tagged pools). vLLM's CPU
    build has no such pools to free: its engine keeps all it holds."""
    if "cuda_graphs" not in engine.components:
        return engine.peak
    return engine.components["cuda_graphs"] + engine.components["non_torch"]
