"""What the decoder layers of a GRPO training forward save for backward: per token of one layer, by the layer's
kind (attention or a state layer's mixer, a dense or a mixture-of-experts feed-forward), and over every layer. Pure
arithmetic over Inputs; memory.py adds checkpointing, the LM head and the rest. Fitted to the exact saved-tensor bytes
of training/saved_bytes.py (tests/planning/test_planner_fidelity.py, test_models_of_now.py hold them within 10%).
"""

from grpo_exp.planning import families
from grpo_exp.planning.inputs import Inputs

# Saved-for-backward bytes per token of one decoder layer, as coefficients of (hidden, q_dim, kv_dim, intermediate,
# q_dim + kv_dim when q/k are RMS-normed as in Qwen3), for fp32 weights, fp32 under bf16 autocast, and bf16 weights.
# Least squares over Qwen2.5-0.5B, 1.5B, 7B, Qwen3-0.6B, 1.7B, 4B and Llama-3.1-8B widths: each within 0.3%: four
# copies of the MLP's intermediate, ~six of the hidden state, two of q and of k/v; flash attention keeps no s x s.
ACTIVATION_BYTES_PER_TOKEN = {
    "fp32": (23.5, 7.89, 9.45, 16.15, 8.02),
    "autocast": (25.5, 3.89, 5.45, 8.15, 6.02),
    "bf16": (15.75, 3.96, 4.73, 8.08, 6.02),
}


# What LoRA on a decoder layer's linear layers changes in its saved bytes per token (peft 0.21: adapters in fp32, the
# layer's input cast to it; dropout, when on, saves its output and mask per adapter), as coefficients of the layer's
# distinct linear inputs (q/k/v's, o's, gate/up's, down's: 2 x hidden + q_dim + intermediate) and of the hidden size,
# with every linear layer adapted, by (weights, dropout on); plus each adapter's r-wide fp32 output. Measured with
# training/saved_bytes.py on Qwen2 layers of 3 widths, r 8 and 32: exact; a frozen linear layer keeps no input.
LORA_SAVED = {
    ("fp32", False): (0.0, -8.0),
    ("fp32", True): (4.0, 20.0),
    ("bf16", False): (2.0, 10.0),
    ("bf16", True): (6.0, 22.0),
}
LORA_ADAPTED = 7  # the linear layers of a decoder layer the coefficients were measured with all adapted


def lora_saved_per_token(x: Inputs) -> float:
    """LoRA's change to one layer's saved bytes per token (LORA_SAVED), for the share of its linear layers adapted;
    0 for full fine-tuning. Autocast over fp32 weights is planned as fp32 (not measured apart)."""
    if not x.lora_modules:
        return 0.0
    c_inputs, c_hidden = LORA_SAVED[("bf16" if x.dtype_bytes == 2 else "fp32", x.lora_dropout)]
    inputs = 2 * x.hidden + x.q_dim + x.intermediate
    share = min(x.lora_modules, LORA_ADAPTED) / LORA_ADAPTED
    return share * (c_inputs * inputs + c_hidden * x.hidden) + 4 * x.lora_modules * x.lora_r


def saved_per_token(x: Inputs, mixer: str, mlp: str) -> float:
    """Bytes one decoder layer saves for backward per token (fitted: training/saved_bytes.py, docs/memory-planner.md):
    norms and residual, its mixer (attention; a state layer's: families.py), its feed-forward (dense; MoE: families.py).
    Padded batches make transformers repeat GQA keys and values to every head: 2 (q_dim - kv_dim) more per token."""
    regime = "bf16" if x.dtype_bytes == 2 else ("autocast" if x.autocast else "fp32")
    c_h, c_q, c_kv, c_f, c_qk = ACTIVATION_BYTES_PER_TOKEN[regime]
    if mixer == "attention":
        mixing = c_q * x.q_dim + c_kv * x.kv_dim + (c_qk * (x.q_dim + x.kv_dim) if x.qk_norm else 0.0)
        mixing += 2 * (x.q_dim - x.kv_dim) * x.activation_bytes
    else:
        mixing = families.linear_attention_saved_per_token(x)
    norms = (c_h + (families.SANDWICH_NORM_BYTES if x.sandwich_norms else 0)) * x.hidden
    norms += lora_saved_per_token(x)
    if mlp == "moe":
        return norms + mixing + families.moe_mlp_saved_per_token(x) + c_f * x.shared_width
    return norms + mixing + c_f * x.intermediate


def layers_saved(x: Inputs, tokens: int) -> tuple[float, float]:
    """(every decoder layer's saved bytes, the largest one layer's) for `tokens` tokens, by the layers' kinds:
    attention or state mixer, dense or MoE feed-forward (the MoE share alike in both)."""
    moe_share = x.moe_layers / x.layers if x.layers else 0.0
    mixers = {"attention": x.layers - x.linear_layers, "linear": x.linear_layers}
    counts = {
        (m, f): n * (moe_share if f == "moe" else 1 - moe_share) for m, n in mixers.items() for f in ("moe", "mlp")
    }
    saved = {kind: tokens * saved_per_token(x, *kind) for kind, count in counts.items() if count > 0}
    return sum(saved[kind] * counts[kind] for kind in saved), max(saved.values())
