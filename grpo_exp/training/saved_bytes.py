"""Exact bytes autograd saves for backward in one GRPO training forward, on CPU: what the planner's
activation and logits terms predict (tests/planning/test_planner_fidelity.py holds them within 10%).

The forward is TRL's own: the model patched with trl's fused LM head (as GRPOTrainer patches it),
called with the completion tokens as labels and `fused_lm_head=True`, then GRPO's loss on the
per-token log-probabilities. Every tensor saved for backward passes through
`torch.autograd.graph.saved_tensors_hooks`; each storage is counted once, in the region where it
was first saved: `layers` (inside a decoder layer: the activation term) or `head` (embedding,
final norm, LM head and loss: the logits term). Weight copies autocast makes (fp32 weights under
bf16 autocast) are counted apart as `autocast_weights`.

Attention: the CPU runs PyTorch's flash kernel for causal SDPA without padding (the inputs here
have none), which, like flash/memory-efficient attention on a GPU, keeps the output and a
log-sum-exp per row, never the s x s matrix. A saved tensor whose last two dims are (s, s) would
mean the math kernel ran; it is counted apart (`attention_matrix`) so the comparison stays fair.

With activation checkpointing a layer saves nothing in the forward (checkpoint's own hooks take
over inside it): what it holds is its input, kept for the recomputation, and during backward one
layer's activations while it is recomputed. So checkpointed `layers` = the measured inputs of every
layer + the largest single layer measured without checkpointing.
"""

from dataclasses import dataclass

from grpo_exp.models.model_families import hf_kwargs
from grpo_exp.models.model_info import ARCH_KEYS

# What one decoder layer is built from: the model's numbers (model_info.ARCH_KEYS) and its type.
LAYER_KEYS = ("model_type", *(k for k in ARCH_KEYS if k not in ("num_hidden_layers", "max_position_embeddings")))


@dataclass
class Saved:
    layers: int  # bytes saved inside decoder layers (checkpointing: inputs kept + one layer recomputed)
    head: int  # embedding output, final norm, LM head, loss
    autocast_weights: int  # low-precision weight copies saved by autocast
    attention_matrix: int  # s x s tensors (the math SDPA kernel); 0 with flash/efficient attention


def _model(arch: dict, layers: int, dtype: str = "float32"):
    """A random-init model of `arch` (LAYER_KEYS, and a family's numbers: model_families.hf_kwargs; its experts
    backend as `experts_implementation`) with `layers` decoder layers, patched as GRPOTrainer patches it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    family = hf_kwargs(arch)
    if family.get("layer_types"):  # the first `layers` of them
        family["layer_types"] = family["layer_types"][:layers]
    config = AutoConfig.for_model(
        arch["model_type"], **{k: arch[k] for k in LAYER_KEYS if k != "model_type"}, **family, num_hidden_layers=layers
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    backend = {"experts_implementation": arch["experts_implementation"]} if arch.get("num_experts") else {}
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype), **backend)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
    return model.train()


def measure(
    arch: dict,
    layers: int = 2,
    batch: int = 2,
    prompt: int = 64,
    completion: int = 48,
    dtype: str = "float32",
    autocast: bool = False,
    checkpointing: bool = False,
    padding: int = 0,
    model=None,
) -> Saved:
    """Saved-for-backward bytes of one micro-batch: `batch` sequences of prompt + completion tokens,
    weights in `dtype`, optionally under bf16 autocast (GRPOConfig bf16=True)."""
    model = model or _model(arch, layers, dtype)
    if checkpointing:
        plain = measure(arch, layers, batch, prompt, completion, dtype, autocast, checkpointing=False, model=model)
        inputs = _layer_input_bytes(model, arch, batch, prompt, completion, autocast)
        largest_layer = plain.layers / layers  # identical layers: the one recomputed during backward
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        try:
            outer = _saved(model, arch, batch, prompt, completion, autocast)
        finally:
            model.activation_checkpointing_disable()
        return Saved(
            layers=int(inputs + largest_layer),
            head=outer.head,
            autocast_weights=outer.autocast_weights,
            attention_matrix=outer.attention_matrix,
        )
    return _saved(model, arch, batch, prompt, completion, autocast, padding)


def _inputs(arch: dict, batch: int, prompt: int, completion: int, padding: int = 0):
    """Random tokens; with `padding`, the first sequence's prompt is left-padded by that many tokens
    (as GRPOTrainer pads prompts of different lengths), which makes the attention take a mask."""
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, arch["vocab_size"], (batch, prompt + completion), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :padding] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :prompt] = -100  # only the completion is scored, as in GRPOTrainer
    return ids, mask, labels


def _forward_and_loss(model, ids, mask, labels, completion: int, autocast: bool):
    """GRPOTrainer's training forward: per-token log-probs from the fused head, then its loss
    (ratio to the detached old log-probs, times the advantages, over completion tokens)."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    logps = out.log_probs[:, -completion:]
    advantages = torch.linspace(-1, 1, ids.shape[0]).unsqueeze(1)
    ratio = torch.exp(logps - logps.detach())
    return -(torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)).mean()


def _saved(model, arch: dict, batch: int, prompt: int, completion: int, autocast: bool, padding: int = 0) -> Saved:
    import torch

    ids, mask, labels = _inputs(arch, batch, prompt, completion, padding)
    seq = ids.shape[1]
    parameter_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    weight_shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape[::-1]) for p in model.parameters()}
    region = ["head"]
    seen: dict[int, str] = {}
    totals = {"layers": 0, "head": 0, "autocast_weights": 0, "attention_matrix": 0}

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in seen and storage.nbytes():
            if key in parameter_storages:
                kind = "weights"  # a parameter (or a view of one): model states, not activations
            elif autocast and tensor.dtype == torch.bfloat16 and tuple(tensor.shape) in weight_shapes:
                kind = "autocast_weights"
            elif tensor.dim() >= 2 and tuple(tensor.shape[-2:]) == (seq, seq):
                kind = "attention_matrix"
            else:
                kind = region[-1]
            seen[key] = kind
            if kind in totals:
                totals[kind] += storage.nbytes()
        return tensor

    def enter(*_):
        region.append("layers")

    def leave(*_):
        region.pop()

    hooks = []
    for layer in model.model.layers:
        hooks.append(layer.register_forward_pre_hook(enter))
        hooks.append(layer.register_forward_hook(leave))
    try:
        # The forward alone: every tensor autograd keeps for backward passes `pack` as it is saved, so
        # running the backward would only cost time (two thirds of it) and count nothing more.
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _forward_and_loss(model, ids, mask, labels, completion, autocast)
    finally:
        for hook in hooks:
            hook.remove()
    return Saved(**totals)


def _layer_input_bytes(model, arch: dict, batch: int, prompt: int, completion: int, autocast: bool) -> int:
    """Bytes of the hidden states entering each decoder layer: what checkpointing keeps per layer."""
    import torch

    ids, mask, labels = _inputs(arch, batch, prompt, completion)
    sizes = []

    def record(_module, args, kwargs):
        sizes.append(_hidden(args, kwargs).untyped_storage().nbytes())

    hooks = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            _forward_and_loss(model, ids, mask, labels, completion, autocast)
    finally:
        for hook in hooks:
            hook.remove()
    return sum(sizes)


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def measure_vision(
    vision: dict, images: int, image_patches: tuple[int, int], dtype: str = "float32", checkpointing: bool = False
) -> int:
    """Saved-for-backward bytes of a random-init Qwen2-VL vision tower (`vision`: model.vision's numbers) over
    `images` images of `image_patches` (rows, columns) patches: what planning/vision.py's activations predict. With
    checkpointing, each block's input is kept and one block is recomputed at a time (as for the text layers)."""
    import torch
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

    config = Qwen2VLVisionConfig(
        depth=vision["depth"],
        embed_dim=vision["hidden_size"],
        mlp_ratio=vision["intermediate_size"] // vision["hidden_size"],  # Qwen2-VL: an int ratio
        num_heads=vision["num_heads"],
        patch_size=vision["patch_size"],
        spatial_merge_size=vision["spatial_merge_size"],
        temporal_patch_size=vision["temporal_patch_size"],
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    tower = Qwen2VisionTransformerPretrainedModel._from_config(config, dtype=getattr(torch, dtype)).train()
    rows, columns = image_patches
    grid = torch.tensor([[1, rows, columns]] * images)
    pixels = torch.randn(
        images * rows * columns, 3 * vision["temporal_patch_size"] * vision["patch_size"] ** 2, dtype=tower.dtype
    )
    parameters = {p.untyped_storage().data_ptr() for p in tower.parameters()}
    seen: set[int] = set()
    total = [0]

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen and storage.data_ptr() not in parameters and storage.nbytes():
            seen.add(storage.data_ptr())
            total[0] += storage.nbytes()
        return tensor

    if checkpointing:
        tower.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        tower(pixels, grid_thw=grid)
    if checkpointing:  # one block alive while it is recomputed in backward
        one_block = measure_vision({**vision, "depth": 1}, images, image_patches, dtype)
        return total[0] + one_block - measure_vision({**vision, "depth": 0}, images, image_patches, dtype)
    return total[0]
