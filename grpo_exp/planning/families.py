"""The planner's terms for the model families GRPO trains now: a mixture of experts (its routed experts, top-k per
token, its experts backend) and layers by attention type (sliding windows, Gated DeltaNet / Mamba2 state layers).
Pure arithmetic over Inputs (inputs.py); memory.py and vllm_engine.py call it. A dense full-attention decoder gets
exactly the dense formulas (every term below is 0 or the dense one).

Saved activations per token, measured with training/saved_bytes.py's hooks on random-init models (fp32, CPU,
docs/memory-planner.md "Models of now"):
- an expert each token is routed to: 4 copies of its width (gate, up, activation, product: like a dense MLP's 4 of
  the intermediate) and its input and output rows: 3.05 x hidden with transformers' eager loop (its per-expert
  gather, output and weighted copy), 2.07 x hidden with grouped_mm and batched_mm (one sorted copy in, one out);
  batched_mm also keeps each token's selected expert weights (gate_up and down: 3 x hidden x width) for backward;
- the router: its fp32 softmax over the experts;
- a Gated DeltaNet layer's mixer: its projections, conv and chunked delta rule (GATED_DELTANET_ELEMENTS), in place
  of attention's.
"""

from grpo_exp.planning.inputs import Inputs

# Bytes (in the activations' element size) an expert slot keeps per token beyond 4 x its width, by experts backend.
EXPERT_ROW_COPIES = {"eager": 3.05, "grouped_mm": 2.07, "batched_mm": 2.07}
ROUTER_BYTES_PER_EXPERT = 4  # the router's softmax, fp32 whatever the weights
# Gated DeltaNet's mixer (projections, conv, transformers' torch_chunk_gated_delta_rule in 64-token chunks), elements
# saved per token: per key channel, per value head x key dim (keys repeated to the value heads), per value channel,
# per value head x chunk (the chunk's attention rows), per chunk state (value heads x key x value dims / 64). Least
# squares over 7 head layouts (key dims 32-128, value heads 2-8): every one within 0.2%.
GATED_DELTANET_ELEMENTS = (12.11, 4.83, 11.44, 5.92, 1.154)
DELTA_RULE_CHUNK = 64
SANDWICH_NORM_BYTES = 4  # per hidden unit per token (measured on Gemma-3: one fp32 copy of the hidden state)


def moe_mlp_saved_per_token(x: Inputs) -> float:
    """What one MoE layer's routed experts keep per token for backward: the router, each of the top-k experts'
    intermediates and rows (a shared expert is a dense MLP of its width: activations.py adds it)."""
    e = x.activation_bytes
    per_expert = (4 * x.expert_width + EXPERT_ROW_COPIES[x.experts_backend] * x.hidden) * e
    if x.experts_backend == "batched_mm":  # each token's selected gate_up and down weights, gathered per token
        per_expert += 3 * x.hidden * x.expert_width * x.dtype_bytes
    return ROUTER_BYTES_PER_EXPERT * x.experts + x.top_k * per_expert


def linear_attention_saved_per_token(x: Inputs) -> float:
    """A Gated DeltaNet (or Mamba2) layer's mixer, per token, in place of attention's (GATED_DELTANET_ELEMENTS)."""
    keys = (x.linear_conv_dim - x.linear_value_dim) // 2  # the conv's channels are keys, queries and values
    kd, vh, vd = x.linear_key_head_dim, x.linear_value_heads, x.linear_value_head_dim
    c_k, c_vk, c_v, c_chunk, c_state = GATED_DELTANET_ELEMENTS
    elements = c_k * keys + c_vk * vh * kd + c_v * vh * vd + c_chunk * vh * DELTA_RULE_CHUNK
    return (elements + c_state * vh * kd * vd / DELTA_RULE_CHUNK) * x.activation_bytes


def largest_expert_gather(x: Inputs) -> float:
    """The largest module a ZeRO-3 rank gathers in a mixture of experts: one layer's experts (gate_up and down of
    every expert), at the weights' bytes; 0 for a dense model."""
    return x.experts * 3 * x.hidden * x.expert_width * x.dtype_bytes if x.moe_layers else 0.0


# --- the KV cache by layer type -----------------------------------------------------------------------------------


def state_elements(x: Inputs) -> float:
    """One state layer's fixed state per sequence: the causal conv's last kernel - 1 inputs over its channels, and
    the recurrent state, value heads x key dim x value dim (vLLM's MambaSpec: conv + temporal state)."""
    if not x.linear_layers:
        return 0.0
    recurrent = x.linear_value_heads * x.linear_key_head_dim * x.linear_value_head_dim
    return (x.linear_conv_kernel - 1) * x.linear_conv_dim + recurrent


def hf_cache_bytes(x: Inputs, seq: int, sequences: int) -> float:
    """transformers' generate cache for `sequences` of `seq` tokens: full layers all of them, sliding layers their
    window (its sliding cache layers), state layers their fixed state."""
    per_token = 2 * x.kv_dim * x.dtype_bytes
    attention = (x.full_layers * seq + x.sliding_layers * min(seq, x.sliding_window or seq)) * per_token
    return sequences * (attention + x.linear_layers * state_elements(x) * x.dtype_bytes)


# vLLM's KV block (tokens per page): its CUDA attention backends' default, and its CPU backend's.
VLLM_BLOCK = {"cuda": 16, "cpu": 128}


def vllm_state_bytes(x: Inputs, element: int) -> float:
    """One state layer's state per sequence in vLLM, per TP shard: its conv state at the served dtype, its recurrent
    (SSM) state at the same, except where the CPU build runs its accelerated GDN kernel (a CPU with AVX-512 BF16),
    which keeps it in fp32 ("Reset SSM cache type to float32 for accelerated GDN mamba backend"; platforms/cpu.py)."""
    conv = (x.linear_conv_kernel - 1) * x.linear_conv_dim
    recurrent = state_elements(x) - conv
    return (conv * element + recurrent * (4 if x.device == "cpu" and x.vllm_fp32_state else element)) / x.vllm_tp


def vllm_page_tokens(x: Inputs, kv_layer_token: float, element: int) -> int:
    """vLLM's block size: its backend's, raised for a model with state layers until an attention page holds a state
    (HybridAttentionMambaModelConfig.verify_and_update_config, which then pads the state page to it), in multiples
    of the backend's."""
    base = VLLM_BLOCK[x.device]
    if not x.linear_layers or kv_layer_token <= 0:
        return base
    return max(base, -(-int(vllm_state_bytes(x, element) / kv_layer_token) // base) * base)


def vllm_kv_cache(x: Inputs, kv_bytes: float, kv_layer_token: float, element: int) -> dict:
    """vLLM's hybrid KV cache manager over `kv_bytes` (v1/core/kv_cache_utils.py, v1/kv_cache_interface.py):

    - layers of one kind (full, sliding, state) form groups of `group_size` layers, the smallest kind's count (the
      largest's when it is under 1.5 x the smallest), padded (_get_kv_cache_groups_uniform_page_size); a block holds
      one page of each layer of a group, so the pool has kv_bytes / (page x group_size) blocks;
    - one max_model_len request takes, per group, every token's blocks on a full layer, its window plus the tokens
      in flight and a block on a sliding one (SlidingWindowSpec.max_admission_blocks_per_request), on a state layer
      one block, or two with prefix caching on (MambaSpec; mamba_cache_mode 'align', vLLM's choice then);
    - "KV cache size: N tokens" is the maximum concurrency x max_model_len (get_kv_cache_capacity);
    - it starts when the memory holds every layer's share of one request (check_enough_kv_cache_memory).

    Returns {tokens, concurrency, request_bytes}."""
    block = vllm_page_tokens(x, kv_layer_token, element)
    page, length = block * kv_layer_token, x.vllm_max_len
    kinds = {"full": x.full_layers, "sliding": x.sliding_layers, "state": x.linear_layers}
    counts = [n for n in kinds.values() if n > 0]
    group_size = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
    in_flight = x.vllm_batched_tokens  # one batch in flight (max_concurrent_batches = 1)
    blocks = {
        "full": -(-length // block),
        "sliding": -(-min((x.sliding_window or 1) - 1 + in_flight, length) // block) + 1,
        "state": 2 if x.vllm_prefix_caching else 1,
    }
    per_request = sum(-(-n // group_size) * blocks[kind] for kind, n in kinds.items() if n > 0)
    concurrency = int(kv_bytes // (page * group_size)) / per_request
    needed = sum(n * blocks[kind] * page for kind, n in kinds.items())
    return {"tokens": int(concurrency * length), "concurrency": concurrency, "request_bytes": needed}
