"""`grpo-exp model-info`: a model's numbers (model_info.read_architecture) as an option of the model group, written as
./conf/model/<name>.yaml, commented like the shipped ones, which every run then finds.

    grpo-exp model-info /models/my-mistral --name my-mistral         # writes conf/model/my-mistral.yaml
"""

import argparse
import json
import sys
from pathlib import Path

from grpo_exp.models.model_families import FAMILY_KEYS
from grpo_exp.models.model_info import ModelInfoError, find_config_json, read_architecture


def model_yaml(name: str, name_or_path: str, arch: dict) -> str:
    """conf/model/<name>.yaml for `arch` (read_architecture's result), commented like the shipped ones."""
    lines = [
        f"# {name_or_path}. Architecture numbers from its config.json (grpo-exp model-info), so",
        "# planning needs no download.",
        f"name: {name}",
        f"name_or_path: {name_or_path}  # hub id, or a local directory holding the same files",
        f"model_type: {arch['model_type']}",
        f"dtype: {arch['dtype']}  # bytes per weight in memory: 2 (bfloat16/float16) or 4 (float32)",
        f"hidden_size: {arch['hidden_size']}",
        f"intermediate_size: {arch['intermediate_size']}",
        f"num_hidden_layers: {arch['num_hidden_layers']}  # activations grow linearly with layers",
        f"num_attention_heads: {arch['num_attention_heads']}",
        f"num_key_value_heads: {arch['num_key_value_heads']}  # KV cache per token = 2 x layers x kv_heads x "
        "head_dim x dtype bytes",
        f"head_dim: {arch['head_dim']}",
        f"vocab_size: {arch['vocab_size']}  # LM head: trl 1.x scores it in 32768-wide tiles (no full logits); full "
        "fine-tuning adds an fp32 d(weight) of vocab x hidden",
        f"tie_word_embeddings: {str(arch['tie_word_embeddings']).lower()}",
        f"max_position_embeddings: {arch['max_position_embeddings']}",
        f"num_parameters: {arch['num_parameters']}",
    ]
    lines += family_lines(arch)
    if arch.get("vision"):
        lines.append(f"vision_parameters: {arch['vision_parameters']}  # the vision tower's, within num_parameters")
        lines.append(
            "vision:  # its tower: activations per patch of every image of every generation (planning/vision.py)"
        )
        lines += [f"  {key}: {value}" for key, value in arch["vision"].items()]
    if arch["planner_notes"]:
        lines.append("planner_notes:  # what the planner does not model for this architecture")
        lines += [f"  - {json.dumps(note)}" for note in arch["planner_notes"]]
    return "\n".join(lines) + "\n"


# The family numbers' comments: what each changes in the plan (planning/moe.py, planning/layer_types.py).
FAMILY_COMMENTS = {
    "num_experts": "every expert is in the weights, gradients and optimizer states",
    "num_experts_per_tok": "top-k: each token's saved expert activations scale with it",
    "moe_intermediate_size": "one expert's width: a ZeRO-3 rank gathers a layer's experts at once",
    "shared_expert_intermediate_size": "the shared expert: a dense MLP every token runs",
    "mlp_only_layers": "layers with a dense MLP",
    "output_router_logits": "the aux loss keeps every layer's router logits (tokens x experts)",
    "sliding_window": "a sliding layer's KV cache holds this many tokens",
    "layer_types": "KV cache and activations per layer type",
}


def family_lines(arch: dict) -> list[str]:
    """The mixture-of-experts and layer-type numbers of a model that has them (none for a dense decoder)."""
    lines = []
    for key in FAMILY_KEYS:
        value = arch.get(key)
        if value in (None, 0, [], False) or (key == "output_router_logits" and not arch.get("num_experts")):
            continue
        comment = f"  # {FAMILY_COMMENTS[key]}" if key in FAMILY_COMMENTS else ""
        lines.append(f"{key}: {json.dumps(value)}{comment}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="grpo-exp model-info", description="Write conf/model/<name>.yaml from a model's config.json."
    )
    parser.add_argument("name_or_path", help="local model directory or hub id")
    parser.add_argument("--name", help="option name (default: the directory or repo name, lower-cased)")
    parser.add_argument(
        "--out", type=Path, default=Path("conf") / "model", help="where the YAML goes (default: ./conf/model)"
    )
    parser.add_argument("--print", action="store_true", help="print the YAML instead of writing it")
    args = parser.parse_args(argv)
    try:
        arch = read_architecture(find_config_json(args.name_or_path))
    except (ModelInfoError, OSError) as exc:
        print(f"grpo_exp.models.model_info: {exc}", file=sys.stderr)
        return 2
    name = args.name or Path(args.name_or_path.rstrip("/")).name.lower()
    text = model_yaml(name, args.name_or_path, arch)
    if args.print:
        print(text, end="")
        return 0
    path = args.out / f"{name}.yaml"
    path.write_text(text)
    print(f"wrote {path}: use model={name}")
    return 0
