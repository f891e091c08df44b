"""What a model is, as the planner and the tiny-model builder read it: config.json's numbers, typed. Part of the
config's schema (schema.py registers it); pure Python, no torch."""

from dataclasses import dataclass, field
from typing import List, Optional

from omegaconf import MISSING

# model.dtype's values (and model.quantization.compute_dtype's): torch dtypes by name; auto = the checkpoint's own
DTYPES = ("bfloat16", "float16", "float32", "auto")


@dataclass
class QuantizationConfig:
    """How the base model's linear layers are held: bitsandbytes quantization at load (peft=qlora), or
    a checkpoint's own (its config.json's quantization_config, read by model=auto). Only adapters train."""

    method: str = "bitsandbytes"  # bitsandbytes | gptq | awq | fp8 | ... (a pre-quantized checkpoint's quant_method)
    bits: int = 4  # 4: nf4/fp4, 0.5 byte per weight + block constants; 8: LLM.int8, 1 byte per weight
    quant_type: str = "nf4"  # nf4 | fp4 (4-bit bitsandbytes)
    double_quant: bool = True  # quantize the block constants too: 0.127 instead of 0.5 bits per weight
    compute_dtype: str = "auto"  # the dtype each layer is dequantized to while it runs; auto = model.dtype
    prequantized: bool = False  # true: the checkpoint is stored quantized (vLLM serves it at these bits too)


@dataclass
class VisionConfig:
    """A vision-language model's vision tower (config.json's vision_config; the image processor's pixel bounds from
    preprocessor_config.json): what its activations and the image tokens it adds to a prompt are planned from."""

    depth: int = MISSING  # transformer blocks: activations grow linearly with them
    hidden_size: int = MISSING  # the blocks' width (Qwen2-VL: embed_dim)
    intermediate_size: int = MISSING  # the blocks' MLP width (Qwen2-VL: embed_dim x mlp_ratio)
    num_heads: int = MISSING
    patch_size: int = 14  # pixels per patch side
    temporal_patch_size: int = 2  # frames per patch (an image is repeated to fill them)
    spatial_merge_size: int = 2  # patches merged per side into one token of the language model
    min_pixels: int = 3136  # the image processor resizes every image into [min_pixels, max_pixels]
    max_pixels: int = 12845056


@dataclass
class ModelConfig:
    name: str = MISSING  # short name used in run names and W&B tags
    name_or_path: Optional[str] = None  # hub id or local directory; null builds the local tiny model
    model_type: str = MISSING  # transformers model_type (config.json)
    # TRL model_init_kwargs.dtype; bytes per weight: 2 (bf16/fp16) or 4 (fp32). auto: the
    # checkpoint's own dtype, read from config.json before planning.
    dtype: str = "bfloat16"
    # Architecture numbers from the model's config.json, so planning needs no download. Left unset
    # (model=auto), grpo_exp.models.model_info fills them from config.json before anything is checked.
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    head_dim: int = MISSING
    vocab_size: int = MISSING
    tie_word_embeddings: bool = MISSING
    max_position_embeddings: int = MISSING
    num_parameters: int = MISSING  # exact count for these numbers (tests check it on the meta device)
    # Parameters of a vision-language model's vision tower (included in num_parameters); 0 for a text model.
    vision_parameters: int = 0
    vision: Optional[VisionConfig] = None  # the vision tower's shape (model-info reads it); null for a text model
    quantization: Optional[QuantizationConfig] = None  # null: 16/32-bit weights (model.dtype)
    planner_notes: List[str] = field(default_factory=list)  # what the planner does not model for this architecture
    # Mixture of experts (config.json's names; 0 experts: a dense model). Every expert is in the weights; each
    # token's activations go through num_experts_per_tok of them (planning/moe.py).
    num_experts: int = 0  # routed experts per MoE layer (num_experts / num_local_experts / n_routed_experts)
    num_experts_per_tok: int = 0  # top-k: each token's saved expert inputs and intermediates scale with it
    moe_intermediate_size: int = 0  # one expert's FFN width
    shared_expert_intermediate_size: int = 0  # the always-on shared expert(s), their width summed
    mlp_only_layers: List[int] = field(default_factory=list)  # layers with a dense MLP (first_k_dense_replace: 0..k-1)
    # transformers' experts backend (from_pretrained experts_implementation): grouped_mm (its default) | eager |
    # batched_mm, which copies each token's top-k experts' weights for its matmuls: memory x hidden x width
    experts_implementation: str = "grouped_mm"
    output_router_logits: bool = False  # the router's aux loss: its logits kept for every layer
    # Attention by layer type (config.json's layer_types; empty: every layer full attention). A sliding layer keeps
    # sliding_window tokens of KV cache; a linear_attention / mamba layer (Gated DeltaNet, Mamba2) a fixed state per
    # sequence: (conv kernel - 1) x conv channels + value heads x key dim x value dim (planning/layer_types.py).
    layer_types: List[str] = field(default_factory=list)
    sliding_window: Optional[int] = None
    linear_num_key_heads: int = 0  # Mamba2: n_groups
    linear_key_head_dim: int = 0  # Mamba2: ssm_state_size
    linear_num_value_heads: int = 0  # Mamba2: mamba_num_heads
    linear_value_head_dim: int = 0  # Mamba2: mamba_head_dim
    linear_conv_kernel_dim: int = 0
    # A Jinja chat template given to the tokenizer instead of its own (open-r1's `chat_template` for base models);
    # null: the tokenizer's. It changes what the model sees, not the memory plan (prompt lengths are data's).
    chat_template: Optional[str] = None
