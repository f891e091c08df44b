"""A recipe's fields at their grpo_exp keys: TRL's GRPOConfig fields verbatim, its script arguments and
open-r1's through config/keys.py's homes, and the forms of older TRL releases (`vllm_device`, YAML's
booleans for words, the eval split its scripts read)."""

import re

import yaml

from grpo_exp import CONF_DIR, DECODER_LINEAR_LAYERS, is_local_path, trackers
from grpo_exp.config import keys
from grpo_exp.config.keys import OWNED_TRAINER_FIELDS
from grpo_exp.config.trl_schema import CHOICES, TrainerFields, VllmFields
from grpo_exp.recipe.experiment import Experiment, inline, is_text, literal
from grpo_exp.recipe.later_fields import LATER

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
# Fields whose value, when it is this one, is what grpo_exp does anyway: noted, not refused. Another value
# would change the run, and is refused with the field's home note.
WHAT_GRPO_EXP_DOES = {
    "dataset_streaming": False,
    "lora_task_type": "CAUSAL_LM",
    "use_rslora": False,
    "use_dora": False,
    "load_in_4bit": False,
    "load_in_8bit": False,
    "bnb_4bit_quant_storage": "uint8",
}
# TRL's ModelConfig quantization fields -> model.quantization (peft=qlora): resolved once use_peft is known.
# YAML 1.1 reads an unquoted no/off/yes/on as a boolean: for a field with a fixed set of words, the word meant.
_YAML_BOOL_WORDS = {False: ("no", "off", "false"), True: ("yes", "on", "true")}


def _shipped_model(name_or_path: str) -> str | None:
    """The conf/model option for a hub id grpo_exp ships numbers for (plans offline)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it: 20 files, ~10x faster
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        if yaml.load(path.read_text(), Loader=loader).get("name_or_path") == name_or_path:
            return path.stem
    return None


def rewards(exp: Experiment, names, source: str) -> None:
    """The recipe's reward functions as data.rewards, replacing data=hf's. A name in exp.skip (--skip <name>) is
    left out, and its reward_weights entry with it (reconcile_weights)."""
    if isinstance(names, str):  # one name, as `--reward_funcs accuracy` gives it
        names = [names]
    if not isinstance(names, list) or not all(is_text(n) for n in names):
        exp.lack(source, f"{names!r}: a list of reward function names or dotted import paths")
        return
    exp.later["reward_names"] = list(names)
    for name in [n for n in names if n in exp.skip]:
        exp.skipped[f"{source}: {name}"] = "left out with its reward_weights entry (--skip)"
    names = [n for n in names if n not in exp.skip]
    if not names:  # every one left out: as --skip reward_funcs, data=hf's own rewards stay
        exp.notes.append(f"every reward of {source} is left out (--skip): data=hf's own rewards stay")
        return
    # data=hf's own rewards are switched off (a null entry removes a reward): the recipe's replace them
    for default in yaml.safe_load((CONF_DIR / "data" / "hf.yaml").read_text()).get("rewards", {}):
        exp.set(f"data.rewards.{default}", None, f"data=hf's default reward, not in the recipe's {source}", source)
    for name in names:
        if name in REWARDS:
            target, note = REWARDS[name]
            exp.set(f"data.rewards.{name}", {"_target_": target}, f"{source}: {name} ({note})", source)
        elif re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", name):
            exp.set(f"data.rewards.{name.rsplit('.', 1)[-1]}", {"_target_": name}, f"{source}: {name}", source)
        else:
            exp.lack(
                f"{source}: {name}",
                "no grpo_exp reward of that name; give its dotted import path, or write one (docs/your-own-code.md), "
                f"or --skip {name} to train without it",
            )
    if any(REWARDS.get(n, ("",))[0].endswith("correctness") for n in names):
        exp.set("data.answer_column", "solution", f"{source}: open-r1's accuracy reads the `solution` column", source)


def reconcile_weights(exp: Experiment, recipe: dict) -> None:
    """reward_weights as the rewards kept: one weight per recipe reward, so a reward left out (--skip <name>) takes
    its weight along, and with reward_funcs left out whole the weights go too (they were the recipe's rewards')."""
    weights, skip = recipe.get("reward_weights"), exp.skip
    if not isinstance(weights, list) or "reward_weights" in skip or "trainer.reward_weights" not in exp.values:
        return
    names = exp.later.get("reward_names")
    if "reward_funcs" in skip or (names is not None and all(n in skip for n in names)):
        exp.drop("reward_weights")
        exp.skipped["reward_weights"] = f"{inline(weights)}: the weights of reward_funcs, which is left out"
    elif names is not None and len(names) == len(weights):
        kept = [w for n, w in zip(names, weights, strict=True) if n not in skip]
        if len(kept) < len(weights):
            left_out = [n for n in names if n in skip]
            exp.set("trainer.reward_weights", kept, f"reward_weights, without those of {', '.join(left_out)}")


def _choice_word(key: str, value):
    """A YAML boolean given to a field of words (`eval_strategy: no` unquoted reads as false): the word meant."""
    allowed = CHOICES.get(key)
    allowed = allowed() if callable(allowed) else allowed
    if isinstance(value, bool) and allowed:
        return next((word for word in _YAML_BOOL_WORDS[value] if word in allowed), value)
    return value


def _lora_targets(exp: Experiment, name: str, value) -> None:
    if value == "all-linear":
        exp.set("peft.target_modules", list(DECODER_LINEAR_LAYERS), name)
    elif is_text(value) and value.isidentifier():
        exp.set("peft.target_modules", [value], name)
    elif isinstance(value, list) and value and all(is_text(v) and v.isidentifier() for v in value):
        exp.set("peft.target_modules", list(value), name)
    else:
        exp.lack(name, f"{value!r}: grpo_exp takes module names (a list such as [q_proj, v_proj], or all-linear)")


def recipe_field(exp: Experiment, name: str, value) -> None:
    """One field of a TRL / open-r1 recipe at its grpo_exp key."""
    alias = keys.ALIASES.get(f"trainer.{name}") or keys.ALIASES.get(f"vllm.{name.removeprefix('vllm_')}")
    home = keys.HOMES.get(name)
    if (
        name in WHAT_GRPO_EXP_DOES
        and type(value) is type(WHAT_GRPO_EXP_DOES[name])
        and value == WHAT_GRPO_EXP_DOES[name]
    ):
        exp.ignore(name, value, "what grpo_exp does anyway")
    elif alias is not None and value == alias.unset:
        exp.ignore(name, value, f"its default (a deprecated name of {alias.canonical})")
    elif alias is not None:  # a deprecated name: written at the key it resolves to
        exp.set(alias.canonical, value, name)
        if alias.note:
            exp.notes.append(f"{name} is written as {alias.canonical}: {alias.note}")
    elif name in TRAINER_FIELDS:
        exp.set(f"trainer.{name}", _choice_word(f"trainer.{name}", value), name)
    elif name.startswith("vllm_") and name.removeprefix("vllm_") in VLLM_FIELDS:
        key = f"vllm.{name.removeprefix('vllm_')}"
        exp.set(key, _choice_word(key, value), name)
    elif name in _WITH_A_HOME_OF_THEIR_OWN:
        _WITH_A_HOME_OF_THEIR_OWN[name](exp, name, value)
    elif name in LATER:
        exp.later[name] = value  # resolve_later(): it depends on other fields or the launch
    elif name in OWNED_TRAINER_FIELDS:
        exp.lack(name, f"grpo_exp sets it itself: {OWNED_TRAINER_FIELDS[name]}")
    elif home is not None and home.ignored:
        exp.ignore(name, value, home.note)
    elif home is not None and home.key is not None:
        exp.set(home.key, value, name)
    elif home is not None:
        exp.lack(name, home.note)
    else:
        exp.lack(name, "not a field of TRL's GRPOConfig, its script arguments or open-r1's")


def _use_vllm(exp: Experiment, name: str, value) -> None:
    if not isinstance(value, bool):
        exp.lack(name, f"{value!r}: true or false")
    else:  # TRL 1.x's default mode (colocate); vllm_mode or TRL <= 0.16's vllm_device says otherwise
        exp.choose("vllm", "colocate" if value else "off", name, replace=False)


def _vllm_mode(exp: Experiment, name: str, value) -> None:
    if value in ("colocate", "server"):
        exp.choose("vllm", value, name)
    else:
        exp.lack(name, f"{value!r}: colocate or server")


def _output_dir(exp: Experiment, name: str, value) -> None:
    """Each run gets its own dir under the recipe's output_dir."""
    if not is_text(value):
        exp.lack(name, f"{value!r}: a directory")
    else:
        run_dir = f"{literal(value)}/${{now:%Y-%m-%d_%H-%M-%S}}_${{run_id:}}"
        exp.set("hydra.run.dir", run_dir, f"{name}: one run dir per run below it", interpolate=True)


def _report_to(exp: Experiment, name: str, value) -> None:
    targets = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if targets is None or not all(isinstance(t, str) for t in targets):
        exp.lack(name, f"{value!r}: a tracker name or a list of them")
    elif set(targets) - {*trackers.names(), "none", "all"}:
        exp.lack(name, f"{targets}: grpo_exp tracks runs with {', '.join(trackers.names())} (logger=...), or none")
    else:
        # "all": as transformers reads it, every tracker installed here
        chosen = trackers.installed() if "all" in targets else [t for t in targets if t != "none"]
        exp.choose("logger", chosen[0] if chosen else "none", name)
        if len(chosen) > 1:
            exp.set("logger.also", chosen[1:], name)


def _model_name_or_path(exp: Experiment, name: str, value) -> None:
    if not is_text(value):
        exp.lack(name, f"{value!r}: a hub model id or a local model directory")
        return
    shipped = _shipped_model(value)
    exp.choose("model", shipped or "auto", name)
    if shipped is None:
        exp.set("model.name_or_path", value, name)


def _dtype(exp: Experiment, name: str, value) -> None:
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(str(value), value)
    exp.set("model.dtype", "auto" if dtype in (None, "auto") else str(dtype), name)


def _use_peft(exp: Experiment, name: str, value) -> None:
    if not isinstance(value, bool):
        exp.lack(name, f"{value!r}: true or false")
    else:
        exp.choose("peft", "lora" if value else "none", name)


def _dataset_name(exp: Experiment, name: str, value) -> None:
    if not is_text(value):
        exp.lack(name, f"{value!r}: a hub dataset id or a local file or directory")
        return
    exp.choose("data", "hf", name)
    where = "a local file or directory" if is_local_path(value) else "a hub dataset id"
    exp.set("data.path", value, f"{name} ({where})")


# Fields that are neither GRPOConfig's nor a deprecated name of one, each written by its own function (before LATER
# and OWNED_TRAINER_FIELDS are consulted: output_dir, report_to, run_name, ... are owned and still have a home).
_WITH_A_HOME_OF_THEIR_OWN = {
    "use_vllm": _use_vllm,
    "vllm_mode": _vllm_mode,
    "output_dir": _output_dir,
    "report_to": _report_to,
    "run_name": lambda exp, name, value: exp.set(name, value, name),
    "seed": lambda exp, name, value: exp.set(name, value, name),
    "ddp_timeout": lambda exp, name, value: exp.set("topology.collective_timeout_s", value, name),
    "deepspeed": lambda exp, name, value: exp.lack(name, "give the DeepSpeed JSON with --deepspeed <file>"),
    "model_name_or_path": _model_name_or_path,
    "dtype": _dtype,
    "torch_dtype": _dtype,
    "use_peft": _use_peft,
    "lora_target_modules": lambda exp, name, value: _lora_targets(exp, name, value),
    "dataset_name": _dataset_name,
    "datasets": lambda exp, name, value: _mixture(exp, name, value),  # trl 1.x's DatasetMixtureConfig
    "reward_funcs": lambda exp, name, value: rewards(exp, value, name),
    "warmup_ratio": lambda exp, name, value: exp.set(
        "trainer.warmup_steps", value, f"{name} (transformers 5: a warmup_steps below 1 is a ratio)"
    ),
}


def _mixture(exp: Experiment, name: str, value) -> None:
    datasets = value if isinstance(value, list) else None
    if not datasets:
        exp.ignore(name, value, "an empty mixture: TRL's script then reads dataset_name") if datasets == [] else None
        if datasets is None:
            exp.lack(name, f"{value!r}: TRL's dataset mixture is a list of {{path, name, split, ...}}")
        return
    one = datasets[0] if len(datasets) == 1 and isinstance(datasets[0], dict) else None
    if one is None or not is_text(one.get("path")) or set(one) - {"path", "name", "split", "columns"}:
        exp.lack(name, "a mixture of datasets (or one with data_dir/data_files/fraction): grpo_exp reads one dataset")
        return
    exp.choose("data", "hf", name)
    exp.set("data.path", one["path"], f"{name}[0].path", name)
    for key, target in (("name", "data.subset"), ("split", "data.split")):
        if one.get(key) is not None:
            exp.set(target, one[key], f"{name}[0].{key}", name)
