"""The model families GRPO trains now, read from config.json into model.*'s typed numbers (model_schema.py):
mixture of experts (Qwen3-MoE, gpt-oss, Qwen3-Next, DeepSeek-style), layers by attention type (Gemma-3's and
gpt-oss's sliding windows, Qwen3-Next's Gated DeltaNet and the H hybrids' Mamba2 layers), and back again as the
config.json keys transformers builds the tiny models of these families from. Pure Python: no torch.

    numbers(text)   config.json's text model -> {FAMILY_KEYS...}
    kind(model)     the plan's first words for it: "128 experts, 8 active; 40 of 48 layers sliding-window (1024)"
    hf_kwargs(model) model.* -> the config.json keys of its family (training/tiny.py, training/saved_bytes.py)
"""

# model.* keys this module owns (0 / [] / None: a dense, full-attention decoder).
FAMILY_KEYS = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "mlp_only_layers",
    "output_router_logits",
    "layer_types",
    "sliding_window",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
SLIDING = "sliding_attention"
LINEAR = ("linear_attention", "mamba")  # a fixed state per sequence, no KV cache per token


def _first(text: dict, *names, default=None):
    return next((text[n] for n in names if text.get(n) is not None), default)


def numbers(text: dict) -> dict:
    """FAMILY_KEYS of a config.json's text model, under each family's spelling."""
    layers = _first(text, "num_hidden_layers", "n_layer", "num_layers", default=0)
    experts = int(_first(text, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0)
    width = _first(text, "moe_intermediate_size", default=None)
    if experts and width is None:  # gpt-oss, Mixtral: intermediate_size is one expert's width
        width = _first(text, "intermediate_size", "ffn_dim", default=0)
    shared = _first(text, "shared_expert_intermediate_size", default=0) or (
        (text.get("n_shared_experts") or 0) * (width or 0)
    )
    return {
        "num_experts": experts,
        "num_experts_per_tok": int(_first(text, "num_experts_per_tok", "experts_per_token", "moe_topk", default=0))
        if experts
        else 0,
        "moe_intermediate_size": int(width or 0) if experts else 0,
        "shared_expert_intermediate_size": int(shared) if experts else 0,
        "mlp_only_layers": _dense_layers(text, layers) if experts else [],
        "output_router_logits": bool(text.get("output_router_logits", False)) if experts else False,
        **_layer_types(text, layers),
    }


def _dense_layers(text: dict, layers: int) -> list[int]:
    """Layers whose MLP is dense in a mixture of experts: Qwen's mlp_only_layers and decoder_sparse_step (every
    step-th layer sparse), DeepSeek's first_k_dense_replace."""
    dense = set(text.get("mlp_only_layers") or [])
    dense |= set(range(int(text.get("first_k_dense_replace") or 0)))
    step = int(text.get("decoder_sparse_step") or 1)
    dense |= {i for i in range(layers) if (i + 1) % step != 0}
    return sorted(i for i in dense if i < layers)


def _layer_types(text: dict, layers: int) -> dict:
    """layer_types as config.json gives them, else as its family derives them (Gemma-3's sliding_window_pattern,
    Qwen3-Next's full_attention_interval, Nemotron-H's hybrid_override_pattern); the state layers' numbers."""
    types = list(text.get("layer_types") or [])
    if not types and text.get("sliding_window_pattern") and text.get("sliding_window"):
        every = int(text["sliding_window_pattern"])
        types = ["full_attention" if (i + 1) % every == 0 else SLIDING for i in range(layers)]
    if not types and text.get("full_attention_interval"):
        every = int(text["full_attention_interval"])
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    if not types and text.get("sliding_window") and text.get("use_sliding_window", True) is not False:
        # Mistral/Mixtral: every layer; Qwen2's use_sliding_window: the layers from max_window_layers on
        first = int(text.get("max_window_layers", 0) or 0)
        types = [SLIDING if i >= first else "full_attention" for i in range(layers)]
    if not types and text.get("hybrid_override_pattern"):  # Nemotron-H: M = Mamba2, * = attention, - = MLP
        types = [{"M": "mamba", "*": "full_attention"}.get(c, "mlp") for c in text["hybrid_override_pattern"]]
    if all(t == "full_attention" for t in types):
        types = []  # the default: nothing to plan apart
    sliding = SLIDING in types and text.get("use_sliding_window", True) is not False
    if "mamba" in types:  # Mamba2: n_groups x ssm_state_size keys, mamba_num_heads x mamba_head_dim values
        state = {
            "linear_num_key_heads": _first(text, "n_groups", default=1),
            "linear_key_head_dim": _first(text, "ssm_state_size", "mamba_d_state", default=128),
            "linear_num_value_heads": _first(text, "mamba_num_heads", "mamba_n_heads", default=0),
            "linear_value_head_dim": _first(text, "mamba_head_dim", "mamba_d_head", default=64),
            "linear_conv_kernel_dim": _first(text, "conv_kernel", "mamba_d_conv", default=4),
        }
    else:
        state = {k: int(text.get(k) or 0) for k in FAMILY_KEYS if k.startswith("linear_")}
    return {"layer_types": types, "sliding_window": text.get("sliding_window") if sliding else None, **state}


def counts(model) -> dict[str, int]:
    """Decoder layers by kind: full, sliding, linear (state), and MLP-only blocks (Nemotron-H's '-')."""
    types = list(model.get("layer_types") or [])
    if not types:
        return {"full": model.num_hidden_layers, "sliding": 0, "linear": 0}
    sliding = sum(t == SLIDING for t in types) if model.get("sliding_window") else 0
    linear = sum(t in LINEAR for t in types)
    return {"full": sum(t not in LINEAR and t != "mlp" for t in types) - sliding, "sliding": sliding, "linear": linear}


def kind(model) -> str:
    """What kind of model the plan's first line names ('' for a dense full-attention decoder)."""
    parts = []
    if model.get("num_experts"):
        parts.append(f"{model.num_experts} experts, {model.num_experts_per_tok} active")
    n = counts(model)
    total = model.num_hidden_layers
    if n["sliding"]:
        parts.append(f"{n['sliding']} of {total} layers sliding-window ({model.sliding_window})")
    if n["linear"]:
        parts.append(f"{n['linear']} of {total} layers linear attention (a state per sequence)")
    return "; ".join(parts)


def hf_kwargs(model) -> dict:
    """model.*'s family numbers (a DictConfig or a plain dict) as config.json keys, for transformers' config classes
    (keys a family does not read are kept as plain attributes: harmless)."""
    get = model.get
    kw: dict = {}
    if get("num_experts"):
        kw |= {
            "num_experts": get("num_experts"),
            "num_local_experts": get("num_experts"),
            "num_experts_per_tok": get("num_experts_per_tok"),
            "experts_per_token": get("num_experts_per_tok"),
            "moe_intermediate_size": get("moe_intermediate_size"),
            "shared_expert_intermediate_size": get("shared_expert_intermediate_size", 0),
            "mlp_only_layers": list(get("mlp_only_layers") or []),
            "decoder_sparse_step": 1,
            "output_router_logits": bool(get("output_router_logits")),
        }
    if get("layer_types"):
        kw["layer_types"] = list(get("layer_types"))
    if get("sliding_window"):
        kw["sliding_window"] = get("sliding_window")
    return kw | {k: get(k) for k in FAMILY_KEYS if k.startswith("linear_") and get(k)}


def with_transformers_defaults(text: dict, outer_type: str | None) -> dict:
    """config.json's text model with the numbers it leaves to transformers filled in from its config class (Gemma-3's
    published config.json leaves `vocab_size` out of `text_config`). transformers is imported only then."""
    if all(text.get(k) is not None for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")):
        return text
    try:
        from transformers import CONFIG_MAPPING

        model_type = text.get("model_type") or (f"{outer_type}_text" if outer_type else None)
        known = model_type if model_type in CONFIG_MAPPING else outer_type
        defaults = CONFIG_MAPPING[known]().to_dict()
    except Exception:  # no transformers here, or a type it does not know: the numbers stay as given
        return text
    defaults = defaults.get("text_config") or defaults
    return {**{k: v for k, v in defaults.items() if k in _DEFAULTED}, **text}


# The numbers a config.json may leave to its class's defaults.
_DEFAULTED = ("vocab_size", "head_dim", "max_position_embeddings", "intermediate_size", "num_key_value_heads")


def unmodelled(text: dict) -> list[str]:
    """What this architecture has that the planner's formulas do not model, named per architecture."""
    notes = []
    if "-" in (text.get("hybrid_override_pattern") or ""):
        notes.append(
            "Nemotron-H: its MLP-only blocks ('-' in hybrid_override_pattern) are planned as decoder layers with an "
            "attention-free MLP; its Mamba2 layers' saved activations are planned as Gated DeltaNet's (fitted on "
            "Qwen3-Next), not measured"
        )
    if text.get("model_type") == "gpt_oss" or (text.get("quantization_config") or {}).get("quant_method") == "mxfp4":
        notes.append(
            "gpt-oss: its attention sinks (one learned score per head, added to every row's softmax) are planned as "
            "plain attention; the published checkpoint's MXFP4 experts are planned at model.dtype (TRL's recipes load "
            "them dequantized), so a vLLM engine serving MXFP4 holds less than planned"
        )
    return notes
