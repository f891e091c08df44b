"""LoRA's trainable parameters: adapters on layers (peft.target_modules) and on a mixture of experts' fused expert
parameters (peft.target_parameters). Pure Python: the planner's inputs (inputs.py) and its fixes (fixes.py) count
them."""

from omegaconf import DictConfig


def lora_params(
    hidden: int, q_dim: int, kv_dim: int, intermediate: int, layers: int, vocab: int, r: int, targets
) -> int:
    """Adapter parameters: r x (in + out) for every targeted layer (an embedding's in is the vocabulary)."""
    shapes = {
        "q_proj": (hidden, q_dim),
        "k_proj": (hidden, kv_dim),
        "v_proj": (hidden, kv_dim),
        "o_proj": (q_dim, hidden),
        "gate_proj": (hidden, intermediate),
        "up_proj": (hidden, intermediate),
        "down_proj": (intermediate, hidden),
    }
    per_layer = sum(r * sum(shapes[t]) for t in targets if t in shapes)
    once = r * (hidden + vocab) * sum(t in targets for t in ("lm_head", "embed_tokens"))  # not per layer
    return per_layer * layers + once


def trainable(cfg: DictConfig) -> int:
    """The adapters' trainable parameters of the peft group (0: full fine-tuning)."""
    if not cfg.peft.enabled:
        return 0
    m = cfg.model
    moe_layers = m.num_hidden_layers - len(m.mlp_only_layers) if m.num_experts else 0
    experts = on_experts(
        m.hidden_size, m.moe_intermediate_size, m.num_experts, moe_layers, cfg.peft.r, cfg.peft.target_parameters
    )
    return experts + lora_params(
        m.hidden_size,
        m.num_attention_heads * m.head_dim,
        m.num_key_value_heads * m.head_dim,
        m.intermediate_size,
        m.num_hidden_layers,
        m.vocab_size,
        cfg.peft.r,
        cfg.peft.target_modules,
    )


def on_experts(hidden: int, width: int, experts: int, moe_layers: int, r: int, targets) -> int:
    """PEFT's LoRA on fused expert parameters (target_parameters; its ParamWrapper): r x experts x (in + out) per
    targeted 3-D parameter, gate_up (hidden -> 2 x width) and down (width -> hidden)."""
    shapes = {"gate_up_proj": (hidden, 2 * width), "down_proj": (width, hidden), "up_proj": (hidden, width)}
    per_layer = sum(r * experts * sum(shapes[t.rsplit(".", 1)[-1]]) for t in targets if t.rsplit(".", 1)[-1] in shapes)
    return per_layer * moe_layers
