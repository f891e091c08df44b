"""Import a TRL / open-r1 recipe as a Hydra experiment: the run a user already has, as one checked,
planned grpo_exp config.

    python -m grpo_exp.recipe recipe.yaml --accelerate zero3.yaml --out conf/experiment/my_run.yaml
    python -m grpo_exp experiment=my_run action=plan          # its plan; any key can still be overridden

`recipe.yaml` is what `trl grpo --config` and open-r1's `grpo.py --config` read: TRL's ModelConfig,
ScriptArguments and GRPOConfig fields side by side (open-r1 adds dataset_prompt_column,
system_prompt, reward_funcs, ...). `--accelerate` is the accelerate config it was launched with
(processes, machines, DeepSpeed stage and offload, mixed precision), `--deepspeed` a DeepSpeed JSON.
Every field lands at its grpo_exp key with the source key in a comment (config/keys.py holds the
homes of names that are not GRPOConfig fields). A field with no home is listed and the import exits 2,
unless `--skip <field>` says to leave it out (it is then written as a comment, not dropped silently).
"""

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grpo_exp import CONF_DIR, DECODER_LINEAR_LAYERS, is_local_path
from grpo_exp.config import keys
from grpo_exp.config.schema import OWNED_TRAINER_FIELDS
from grpo_exp.config.trl_schema import TrainerFields, VllmFields

CONF = CONF_DIR
TRAINER_FIELDS = set(TrainerFields.__dataclass_fields__)
VLLM_FIELDS = set(VllmFields.__dataclass_fields__)
# Reward names -> grpo_exp's closest function and what it reads: open-r1's (accuracy, format, tag_count
# are its defaults) and TRL's `trl grpo` names (importable from trl itself).
REWARDS = {
    "accuracy": (
        "grpo_exp.training.rewards.correctness",
        "open-r1's accuracy: the final answer against the `solution` column",
    ),
    "format": (
        "grpo_exp.training.rewards.think_answer_format",
        "open-r1's format: <think>..</think><answer>..</answer>",
    ),
    "tag_count": ("grpo_exp.training.rewards.tag_count", "open-r1's tag_count: 0.25 per think/answer tag"),
    "accuracy_reward": ("trl.rewards.accuracy_reward", "TRL's own (math_verify against `solution`)"),
    "reasoning_accuracy_reward": ("trl.rewards.reasoning_accuracy_reward", "TRL's own"),
    "think_format_reward": ("trl.rewards.think_format_reward", "TRL's own"),
}
OPEN_R1_DEFAULT_REWARDS = ["accuracy", "format", "tag_count"]
OPEN_R1_KEYS = {
    "dataset_prompt_column",
    "system_prompt",
    "benchmarks",
    "callbacks",
    "chat_template",
    "hub_model_revision",
}
# accelerate keys that only say how accelerate launches: grpo_exp launches with torchrun or SLURM itself.
LAUNCHER_ONLY = {
    "compute_environment",
    "debug",
    "downcast_bf16",
    "dynamo_config",
    "enable_cpu_affinity",
    "main_training_function",
    "rdzv_backend",
    "same_network",
    "tpu_env",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "use_cpu",
    "gpu_ids",
    "deepspeed_multinode_launcher",
    "zero3_init_flag",
    "machine_rank",  # per node: grpo_exp reads topology.node_rank (NODE_RANK) on each node, not from the recipe
}


class RecipeError(ValueError):
    pass


@dataclass
class Experiment:
    """What the import writes: group choices, values (each with its source) and what was left out."""

    name: str
    groups: dict[str, str] = field(default_factory=dict)
    values: dict[str, tuple[object, str]] = field(default_factory=dict)  # key -> (value, source comment)
    no_home: dict[str, str] = field(default_factory=dict)  # source field -> why
    skipped: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value, source: str) -> None:
        self.values[key] = (value, source)

    def lack(self, source: str, why: str) -> None:
        self.no_home[source] = why


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise RecipeError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: not a mapping of fields")
    return data


def _shipped_model(name_or_path: str) -> str | None:
    """The conf/model option for a hub id grpo_exp ships numbers for (plans offline)."""
    for path in sorted((CONF / "model").glob("*.yaml")):
        if yaml.safe_load(path.read_text()).get("name_or_path") == name_or_path:
            return path.stem
    return None


def _rewards(exp: Experiment, names: list[str], source: str) -> None:
    # data=hf's own rewards are switched off (a null entry removes a reward): the recipe's replace them
    for default in yaml.safe_load((CONF / "data" / "hf.yaml").read_text()).get("rewards", {}):
        exp.set(f"data.rewards.{default}", None, f"data=hf's default reward, not in the recipe's {source}")
    for name in names:
        if name in REWARDS:
            target, note = REWARDS[name]
            exp.set(f"data.rewards.{name}", {"_target_": target}, f"{source}: {name} ({note})")
        elif "." in name:
            exp.set(f"data.rewards.{name.rsplit('.', 1)[-1]}", {"_target_": name}, f"{source}: {name}")
        else:
            exp.lack(
                f"{source}: {name}",
                "no grpo_exp reward of that name; give its dotted import path, or write one (README: reward function)",
            )
    if any(REWARDS.get(n, ("",))[0].endswith("correctness") for n in names):
        exp.set("data.answer_column", "solution", f"{source}: open-r1's accuracy reads the `solution` column")


def _recipe_field(exp: Experiment, name: str, value) -> None:
    """One field of a TRL / open-r1 recipe at its grpo_exp key."""
    alias = keys.ALIASES.get(f"trainer.{name}") or keys.ALIASES.get(f"vllm.{name.removeprefix('vllm_')}")
    if alias is not None:  # a deprecated name: written at the key it resolves to
        exp.set(alias.canonical, value, name)
    elif name in TRAINER_FIELDS:
        exp.set(f"trainer.{name}", value, name)
    elif name.startswith("vllm_") and name.removeprefix("vllm_") in VLLM_FIELDS:
        exp.set(f"vllm.{name.removeprefix('vllm_')}", value, name)
    elif name == "use_vllm":
        exp.groups.setdefault("vllm", "colocate" if value else "off")
    elif name == "vllm_mode":
        exp.groups["vllm"] = str(value)
    elif name == "output_dir":  # each run gets its own dir under the recipe's output_dir
        exp.set(
            "hydra.run.dir", f"{value}/${{now:%Y-%m-%d_%H-%M-%S}}_${{run_id:}}", f"{name}: one run dir per run below it"
        )
    elif name == "report_to":
        targets = [value] if isinstance(value, str) else list(value or [])
        if set(targets) - {"wandb", "none"}:
            exp.lack(name, f"{targets}: grpo_exp tracks runs with W&B (logger=wandb) or nothing (logger=none)")
        exp.groups["logger"] = "wandb" if "wandb" in targets else "none"
    elif name in ("run_name", "seed"):
        exp.set(name, value, name)
    elif name == "ddp_timeout":
        exp.set("topology.collective_timeout_s", value, name)
    elif name == "deepspeed":
        exp.lack(name, "give the DeepSpeed JSON with --deepspeed <file>")
    elif name in OWNED_TRAINER_FIELDS:
        exp.lack(name, f"grpo_exp sets it itself: {OWNED_TRAINER_FIELDS[name]}")
    elif name in ("model_name_or_path",):
        shipped = _shipped_model(str(value))
        exp.groups["model"] = shipped or "auto"
        if shipped is None:
            exp.set("model.name_or_path", value, name)
    elif name in ("dtype", "torch_dtype"):
        exp.set("model.dtype", "auto" if value in (None, "auto") else str(value), name)
    elif name == "use_peft":
        exp.groups["peft"] = "lora" if value else "none"
    elif name == "lora_target_modules":
        exp.set("peft.target_modules", list(DECODER_LINEAR_LAYERS) if value == "all-linear" else list(value), name)
    elif name == "dataset_name":
        exp.groups["data"] = "hf"
        exp.set(
            "data.path",
            value,
            f"{name} ({'a local file or directory' if is_local_path(str(value)) else 'a hub dataset id'})",
        )
    elif name == "reward_funcs":
        _rewards(exp, list(value or []), name)
    elif name == "warmup_ratio":
        exp.set("trainer.warmup_steps", value, f"{name} (transformers 5: a warmup_steps below 1 is a ratio)")
    elif (home := keys.HOMES.get(name)) is not None and home.key is not None:
        exp.set(home.key, value, name)
    elif home is not None:
        exp.lack(name, home.note)
    else:
        exp.lack(name, "not a field of TRL's GRPOConfig, its script arguments or open-r1's")


def _accelerate(exp: Experiment, acc: dict) -> None:
    """accelerate's launch config: processes and machines become the topology, its DeepSpeed plugin
    the deepspeed group, mixed precision the trainer's (and the model's dtype when the recipe has none)."""
    machines = int(acc.get("num_machines") or 1)
    processes = int(acc.get("num_processes") or 1)
    exp.groups.setdefault(
        "topology",
        f"{machines}x{processes // machines}"
        if (CONF / "topology" / f"{machines}x{processes // machines}.yaml").exists()
        else "1x8",
    )
    exp.set("topology.nnodes", machines, "accelerate num_machines")
    exp.set("topology.gpus_per_node", processes // machines, f"accelerate num_processes ({processes}) / num_machines")
    for name, key in (("main_process_ip", "topology.master_addr"), ("main_process_port", "topology.master_port")):
        if acc.get(name) is not None:
            exp.set(key, acc[name], f"accelerate {name}")
    precision = acc.get("mixed_precision")
    if precision in ("bf16", "fp16"):
        exp.set(f"trainer.{precision}", True, "accelerate mixed_precision")
        if "model.dtype" not in exp.values:
            exp.set("model.dtype", "bfloat16" if precision == "bf16" else "float16", "accelerate mixed_precision")
    elif precision not in (None, "no"):
        exp.lack("accelerate mixed_precision", f"{precision}: grpo_exp trains in bf16, fp16 or fp32")
    kind = acc.get("distributed_type")
    if kind == "DEEPSPEED":
        _accelerate_deepspeed(exp, acc.get("deepspeed_config") or {})
    elif kind == "FSDP":
        exp.lack(
            "accelerate distributed_type", "FSDP: grpo_exp shards with DeepSpeed ZeRO (deepspeed=zero3 is the closest)"
        )
    elif kind in ("MULTI_GPU", "NO", None):
        exp.groups.setdefault("deepspeed", "none")
    for name in (
        set(acc)
        - LAUNCHER_ONLY
        - {
            "num_machines",
            "num_processes",
            "main_process_ip",
            "main_process_port",
            "mixed_precision",
            "distributed_type",
            "deepspeed_config",
            "fsdp_config",
        }
    ):
        exp.lack(f"accelerate {name}", "not an accelerate setting grpo_exp knows")


def _accelerate_deepspeed(exp: Experiment, ds: dict) -> None:
    if ds.get("deepspeed_config_file"):
        _deepspeed_json(exp, _load(Path(ds["deepspeed_config_file"])), "accelerate deepspeed_config_file")
        return
    stage = int(ds.get("zero_stage", 2))
    offload = ds.get("offload_optimizer_device") not in (None, "none") or ds.get("offload_param_device") not in (
        None,
        "none",
    )
    exp.groups["deepspeed"] = f"zero{stage}_offload" if offload and stage in (2, 3) else f"zero{stage}"
    if ds.get("zero3_save_16bit_model") is not None and stage == 3:
        exp.set(
            "deepspeed.zero_optimization.stage3_gather_16bit_weights_on_model_save",
            bool(ds["zero3_save_16bit_model"]),
            "accelerate zero3_save_16bit_model",
        )
    if ds.get("gradient_accumulation_steps") not in (None, "auto"):
        exp.set(
            "trainer.gradient_accumulation_steps",
            ds["gradient_accumulation_steps"],
            "accelerate deepspeed gradient_accumulation_steps",
        )
    if ds.get("gradient_clipping") not in (None, "auto"):
        exp.set("trainer.max_grad_norm", ds["gradient_clipping"], "accelerate deepspeed gradient_clipping")
    for name in (
        set(ds)
        - LAUNCHER_ONLY
        - {
            "zero_stage",
            "offload_optimizer_device",
            "offload_param_device",
            "zero3_save_16bit_model",
            "gradient_accumulation_steps",
            "gradient_clipping",
            "deepspeed_config_file",
        }
    ):
        exp.lack(f"accelerate deepspeed_config.{name}", "not an accelerate DeepSpeed setting grpo_exp knows")


def _deepspeed_json(exp: Experiment, ds: dict, source: str) -> None:
    """A DeepSpeed JSON as it is: the deepspeed group holds DeepSpeed's own format."""
    stage = (ds.get("zero_optimization") or {}).get("stage", 0)
    exp.groups["deepspeed"] = f"zero{stage}" if stage in (1, 2, 3) else "none"
    exp.set("deepspeed", ds, f"{source} (DeepSpeed's JSON, replacing the option's values)")


def build(recipe: dict, accelerate: dict | None, deepspeed: dict | None, name: str, skip: set[str]) -> Experiment:
    exp = Experiment(name)
    for key, value in recipe.items():
        if key in skip:
            exp.skipped[key] = repr(value)
            continue
        _recipe_field(exp, key, value)
    if "reward_funcs" not in recipe and OPEN_R1_KEYS & set(
        recipe
    ):  # open-r1's default rewards, as its script would use them
        _rewards(exp, OPEN_R1_DEFAULT_REWARDS, "reward_funcs (open-r1's default)")
    if accelerate:
        _accelerate(exp, accelerate)
    if deepspeed:
        _deepspeed_json(exp, deepspeed, "--deepspeed")
    for source in list(exp.no_home):
        if source.split(": ")[0].removeprefix("accelerate ") in skip or source in skip:
            exp.skipped[source] = exp.no_home.pop(source)
    return exp


def _nest(values: dict[str, tuple[object, str]]) -> dict:
    tree: dict = {}
    for key, (value, source) in values.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = (value, source)
    return tree


def _scalar(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _emit(tree: dict, indent: int = 0) -> list[str]:
    lines = []
    pad = "  " * indent
    for key, item in tree.items():
        if isinstance(item, dict):
            lines.append(f"{pad}{key}:")
            lines += _emit(item, indent + 1)
        else:
            value, source = item
            lines.append(f"{pad}{key}: {_scalar(value)}  # {source}")
    return lines


def render(exp: Experiment, sources: list[str]) -> str:
    head = [
        "# @package _global_",
        f"# Imported by `python -m grpo_exp.recipe` from {', '.join(sources)}.",
        f"#   python -m grpo_exp experiment={exp.name} action=plan     # its plan",
        f"#   python -m grpo_exp experiment={exp.name}                 # run it (any key can still be overridden)",
        "# Each value names the recipe field it came from.",
        "defaults:",
        *[f"  - override /{group}: {option}" for group, option in sorted(exp.groups.items())],
        "",
        f"experiment: {exp.name}",
    ]
    body = _emit(_nest(exp.values))
    tail = [f"# skipped (--skip): {source}: {why}" for source, why in exp.skipped.items()]
    return "\n".join(head + body + tail) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_exp.recipe",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", type=Path, help="a TRL / open-r1 GRPO recipe (YAML, as `trl grpo --config` reads)")
    parser.add_argument("--accelerate", type=Path, help="the accelerate config the recipe was launched with")
    parser.add_argument("--deepspeed", type=Path, help="a DeepSpeed JSON (or YAML) config")
    parser.add_argument(
        "--out", type=Path, help="where the experiment goes (default: conf/experiment/<recipe name>.yaml)"
    )
    parser.add_argument(
        "--skip", action="append", default=[], help="a field with no grpo_exp home to leave out (repeatable)"
    )
    args = parser.parse_args(argv)
    out = args.out or CONF / "experiment" / f"{args.recipe.stem}.yaml"
    try:
        recipe = _load(args.recipe)
        accelerate = _load(args.accelerate) if args.accelerate else None
        deepspeed = _load(args.deepspeed) if args.deepspeed else None
    except RecipeError as exc:
        print(f"grpo_exp.recipe: {exc}", file=sys.stderr)
        return 2
    exp = build(recipe, accelerate, deepspeed, out.stem, set(args.skip))
    if exp.no_home:
        print(
            f"grpo_exp.recipe: {len(exp.no_home)} field(s) of the recipe have no grpo_exp key; nothing written:",
            file=sys.stderr,
        )
        for source, why in exp.no_home.items():
            print(
                f"  {source}: {why}\n    fix: --skip {source.split(': ')[0].removeprefix('accelerate ')} to leave it "
                "out",
                file=sys.stderr,
            )
        return 2
    sources = [str(p) for p in (args.recipe, args.accelerate, args.deepspeed) if p]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(exp, sources))
    print(
        f"wrote {out}: {len(exp.values)} value(s), {len(exp.groups)} group choice(s), {len(exp.skipped)} skipped\n"
        f"  python -m grpo_exp experiment={out.stem} action=plan"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
