"""A model's architecture numbers, read from its config.json, so any causal LM plans without a
hand-written YAML.

    python -m grpo_exp model=auto model.name_or_path=/models/my-mistral        # numbers filled in here
    grpo-exp model-info /models/my-mistral --name my-mistral         # writes conf/model/my-mistral.yaml

`complete(cfg.model)` fills every architecture number the model group leaves unset (model=auto)
from config.json: a local directory, the local HF cache, or that one small file from the hub when
online. The parameter count is exact when the weights' safetensors headers are at hand (read
without loading a tensor), else estimated from the numbers (the plan's notes say so). What the
planner does not model for this architecture (mixture of experts, sliding-window attention, a
vision tower) goes to `model.planner_notes`, which the plan prints.

Pure Python (json, huggingface_hub): no torch on this path, except `lora_layer_names`, which
builds the model on the meta device to list the layers LoRA can adapt (only for peft runs; cached).
"""

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from grpo_exp import Problem, cache_root, is_local_path, kept
from grpo_exp.config.model_schema import QuantizationConfig, VisionConfig
from grpo_exp.models import model_families

# The numbers the planner and the tiny-model builder read (conf/model/*.yaml carry them).
ARCH_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
)
# The tiny model's recipe (training/tiny.py): bump when it changes, so stale caches are rebuilt.
TINY_BUILD_VERSION = 6


def tiny_model_path(model_cfg: DictConfig, tool_sets: list | None = None) -> Path:
    """Where the tiny model for these architecture numbers lives once built (training/tiny.py builds it; with
    `tool_sets`, config/env.py's schemas, the one warm-started on calls of those tools). Pure: the planner names
    it in a server's argv."""
    arch = {k: model_cfg[k] for k in ARCH_KEYS} | model_families.hf_kwargs(model_cfg)
    tools = tool_sets or []
    key = hashlib.sha256(json.dumps([TINY_BUILD_VERSION, arch, tools], sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / f"tiny-{model_cfg.model_type}{'-tools' if tools else ''}-{key}"


# config.json spellings of the same numbers across model families, first match wins.
_ALIASES = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "intermediate_size": ("intermediate_size", "ffn_dim", "n_inner"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_seq_len"),
}


class ModelInfoError(ValueError):
    """config.json is missing or does not describe a decoder-only causal LM."""


def find_config_json(name_or_path: str) -> Path:
    """config.json of a local model directory, of a hub id in the local HF cache, or downloaded
    (that one file) when the hub is reachable."""
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        if (local / "config.json").is_file():
            return local / "config.json"
        raise ModelInfoError(f"{local} has no config.json (not a directory written by save_pretrained)")
    if is_local_path(name_or_path):
        raise ModelInfoError(f"{name_or_path} is not a model directory")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name_or_path, "config.json")
    if isinstance(cached, str):
        return Path(cached)
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        raise ModelInfoError(f"{name_or_path}: no config.json in the local HF cache and HF_HUB_OFFLINE is set")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(name_or_path, "config.json"))
    except Exception as exc:  # no network, gated repo, unknown id
        raise ModelInfoError(
            f"{name_or_path}: could not fetch config.json from the hub ({type(exc).__name__})"
        ) from exc


def read_architecture(config_json: Path) -> dict:
    """{model_type, dtype, num_parameters, planner_notes, *ARCH_KEYS} for a causal LM's config.json."""
    config = json.loads(Path(config_json).read_text())
    if config.get("is_encoder_decoder"):
        raise ModelInfoError(
            f"{config.get('model_type')} is an encoder-decoder model; GRPO trains decoder-only causal LMs"
        )
    architectures = config.get("architectures") or []
    notes = []
    if architectures and not any(
        a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in architectures
    ):
        raise ModelInfoError(f"architectures {architectures} has no causal LM head (…ForCausalLM)")
    text = config.get("text_config") or config
    vision = vision_tower(config, Path(config_json).parent)
    if config.get("vision_config") is not None and vision is None:
        notes.append(
            "vision-language model: its vision tower is counted in the weights (and, trained in full, in gradients and "
            "optimizer states); its layout is not Qwen2-VL's, so image tokens' share of the sequence and the tower's "
            "activations are not modelled"
        )
    text = model_families.with_transformers_defaults(text, config.get("model_type"))
    numbers = _numbers(text, notes)
    quantization = _quantization(config.get("quantization_config"))
    # quantized tensors are packed: counted on meta
    weights = {} if quantization else _safetensors_shapes(Path(config_json).parent)
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if weights:
        tied = not any(name.endswith("lm_head.weight") for name in weights)
    numbers["tie_word_embeddings"] = True if tied is None else bool(tied)
    notes += model_families.unmodelled(text)
    numbers.update(model_families.numbers(text))
    facts = meta_facts(Path(config_json).parent) if not weights else None
    if weights:
        num_parameters = sum(_numel(shape) for shape in weights.values())
    elif facts is not None:
        num_parameters = facts["num_parameters"]
    else:
        experts = next((text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if text.get(k)), 1)
        num_parameters = _estimate_parameters(numbers, experts, text.get("moe_intermediate_size"))
        notes.append("parameter count estimated from config.json (no safetensors weights at hand)")
    dtype = (
        config.get("dtype") or config.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype") or "bfloat16"
    )
    if quantization:
        notes.append(
            f"pre-quantized checkpoint ({quantization['method']}, {quantization['bits']}-bit): planned at its precision"
        )
    return {
        "model_type": config.get("model_type") or text.get("model_type"),
        "dtype": dtype,
        **numbers,
        "num_parameters": int(num_parameters),
        "vision_parameters": (facts or {}).get("vision_parameters", 0),
        "vision": vision,
        "quantization": quantization,
        "planner_notes": notes,
    }


def _numbers(text: dict, notes: list[str]) -> dict:
    """The architecture numbers of config.json's text model, under any family's spelling, the usual defaults filled
    in (a note says what was assumed)."""
    numbers: dict[str, Any] = {
        key: next((text[a] for a in aliases if text.get(a) is not None), None) for key, aliases in _ALIASES.items()
    }
    missing = [
        k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if numbers[k] is None
    ]
    if missing:
        raise ModelInfoError(f"config.json lacks {missing}; cannot plan this architecture")
    numbers["num_key_value_heads"] = numbers["num_key_value_heads"] or numbers["num_attention_heads"]
    numbers["head_dim"] = numbers["head_dim"] or numbers["hidden_size"] // numbers["num_attention_heads"]
    numbers["intermediate_size"] = numbers["intermediate_size"] or 4 * numbers["hidden_size"]
    if numbers["max_position_embeddings"] is None:
        numbers["max_position_embeddings"] = 2048
        notes.append("config.json has no max_position_embeddings: 2048 assumed for vLLM's context")
    return numbers


def vision_tower(config: dict, folder: Path) -> dict | None:
    """model.vision for a Qwen2-VL / Qwen2.5-VL config.json (planning/vision.py's numbers), the pixel bounds from
    the image processor's preprocessor_config.json beside it; None for a text model or another tower layout."""
    v = config.get("vision_config")
    if not v or v.get("depth") is None or v.get("spatial_merge_size") is None:
        return None
    width = v.get("embed_dim") or v.get("hidden_size")  # Qwen2-VL's hidden_size is the merger's output
    tower = {
        "depth": v["depth"],
        "hidden_size": width,
        "intermediate_size": v.get("intermediate_size") or int(width * v.get("mlp_ratio", 4)),
        "num_heads": v["num_heads"],
        "patch_size": v.get("patch_size", 14),
        "temporal_patch_size": v.get("temporal_patch_size", 2),
        "spatial_merge_size": v["spatial_merge_size"],
    }
    processor = folder / "preprocessor_config.json"
    if processor.is_file():
        p = json.loads(processor.read_text())
        size = p.get("size") or {}
        tower["min_pixels"] = p.get("min_pixels") or size.get("shortest_edge") or 3136
        tower["max_pixels"] = p.get("max_pixels") or size.get("longest_edge") or 12845056
    return tower


def _quantization(config: dict | None) -> dict | None:
    """model.quantization for a checkpoint's quantization_config (None when it has none)."""
    if not config:
        return None
    method = config.get("quant_method", "bitsandbytes")
    if method == "bitsandbytes":
        bits = 4 if config.get("load_in_4bit") else 8
        compute = config.get("bnb_4bit_compute_dtype") or "auto"
        return {
            "method": method,
            "bits": bits,
            "quant_type": config.get("bnb_4bit_quant_type") or "nf4",
            "double_quant": bool(config.get("bnb_4bit_use_double_quant")),
            "compute_dtype": str(compute).removeprefix("torch."),
            "prequantized": True,
        }
    bits = int(config.get("bits") or config.get("w_bit") or (8 if "fp8" in method else 4))
    return {
        "method": method,
        "bits": bits,
        "quant_type": "nf4",
        "double_quant": False,
        "compute_dtype": "auto",
        "prequantized": True,
    }


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _safetensors_shapes(model_dir: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from the safetensors headers (8-byte length + JSON): no tensor is read."""
    files = sorted(model_dir.glob("*.safetensors"))
    shapes = {}
    for path in files:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        shapes.update({name: meta["shape"] for name, meta in header.items() if name != "__metadata__"})
    return shapes


def _estimate_parameters(n: dict, experts: int = 1, expert_intermediate: int | None = None) -> int:
    """A Llama-style decoder without biases: embeddings, attention, SwiGLU MLP (each expert's, plus
    a router, for a mixture of experts), two norms per layer."""
    h, q, kv = n["hidden_size"], n["num_attention_heads"] * n["head_dim"], n["num_key_value_heads"] * n["head_dim"]
    mlp = (
        3 * h * n["intermediate_size"]
        if experts == 1
        else experts * 3 * h * (expert_intermediate or n["intermediate_size"]) + h * experts
    )
    per_layer = h * q + 2 * h * kv + q * h + mlp + 2 * h
    embeddings = n["vocab_size"] * h * (1 if n["tie_word_embeddings"] else 2)
    return embeddings + n["num_hidden_layers"] * per_layer + h


def complete(model: DictConfig) -> list[Problem]:
    """Fill the architecture numbers `model` leaves unset (model=auto) from the model's config.json."""
    unset = [k for k in (*ARCH_KEYS, "model_type", "num_parameters") if OmegaConf.is_missing(model, k)]
    if not unset and model.dtype != "auto":
        return []
    if model.name_or_path is not None:
        unset += ["vision_parameters"]
    if model.name_or_path is None:
        return [
            Problem(
                "model.name_or_path",
                "is null, so there is no config.json to read the architecture from",
                "set model.name_or_path=<local dir or hub id>",
            )
        ]
    try:
        arch = read_architecture(find_config_json(model.name_or_path))
    except (ModelInfoError, OSError, json.JSONDecodeError) as exc:
        return [
            Problem(
                "model.name_or_path",
                str(exc),
                "point it at a directory written by save_pretrained (with config.json), or a hub id in the local HF "
                "cache",
            )
        ]
    with open_dict(model):
        for key in unset:
            model[key] = arch[key]
        if model.dtype == "auto":  # the checkpoint's own dtype, concrete so the planner can size weights
            model.dtype = arch["dtype"]
        if arch["vision"] is not None and model.get("vision") is None:
            model.vision = VisionConfig(**arch["vision"])
        if arch["quantization"] is not None and model.get("quantization") is None:  # stored quantized: planned so
            model.quantization = QuantizationConfig(**arch["quantization"])
        model.planner_notes = list(model.get("planner_notes") or []) + arch["planner_notes"]
        if not model.num_experts and not model.layer_types:  # the option left the family to config.json
            for key in model_families.FAMILY_KEYS:
                model[key] = arch[key]
    return []


def meta_facts(source, model: DictConfig | None = None) -> dict | None:
    """{num_parameters, vision_parameters, lora_layers} of the model built on the meta device (no
    weights) with the class TRL would load: config.json's architectures[0] from transformers (a
    vision-language model's own class), else AutoModelForCausalLM. `source` is a model directory, or
    None with `model` (a shipped option's numbers). Cached per architecture under $GRPO_EXP_CACHE,
    since building imports torch (~4 s). None when transformers cannot build it."""

    arch = {k: model[k] for k in ARCH_KEYS} if model is not None else {}
    text = (
        Path(source, "config.json").read_text()
        if source
        else json.dumps([model.model_type if model is not None else None, arch], sort_keys=True)
    )
    key = hashlib.sha256(f"{FACTS_VERSION}{text}".encode()).hexdigest()[:16]
    try:
        facts = kept(cache_root() / "model_facts" / f"{key}.json", lambda: _facts_json(source, model, arch))
    except Exception:  # an architecture this transformers does not know: the caller estimates (nothing kept)
        return None
    return json.loads(facts)


FACTS_VERSION = 3  # bump when meta_facts' contents change
VISION_MODULES = ("visual", "vision_tower", "vision_model", "vision_encoder")


def _facts_json(source, model, arch: dict) -> bytes:
    return json.dumps(_build_on_meta(source, model, arch)).encode()


def _build_on_meta(source, model, arch: dict) -> dict:
    import warnings

    import torch
    import transformers

    config = (
        transformers.AutoConfig.from_pretrained(source)
        if source
        else transformers.AutoConfig.for_model(model.model_type, **arch)
    )
    config.quantization_config = None  # count the logical weights, not a quantizer's packed storage
    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    cls = cls if cls is not None and hasattr(cls, "_from_config") else transformers.AutoModelForCausalLM
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = cls._from_config(config) if cls is not transformers.AutoModelForCausalLM else cls.from_config(config)
    params = dict(built.named_parameters())
    vision = sum(p.numel() for name, p in params.items() if set(name.split(".")) & set(VISION_MODULES))
    # The layer types peft's LoRA adapts (peft/tuners/lora/layer.py dispatch): linear, embedding, convolutions,
    # and transformers' GPT-2-style Conv1D.
    from transformers.pytorch_utils import Conv1D

    adaptable = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, Conv1D)
    lora = sorted({name.rsplit(".", 1)[-1] for name, module in built.named_modules() if isinstance(module, adaptable)})
    return {
        "num_parameters": sum(p.numel() for p in params.values()),
        "vision_parameters": vision,
        "lora_layers": lora,
    }


def lora_layer_names(model: DictConfig) -> list[str]:
    """Names of the modules of this model PEFT's LoRA can adapt (what peft's target_modules match: linear
    layers, embeddings, convolutions), from the class TRL would load built on the meta device (meta_facts)."""
    source = model.name_or_path if model.name_or_path and Path(model.name_or_path).expanduser().is_dir() else None
    facts = meta_facts(source, None if source else model)
    return facts["lora_layers"] if facts else []
