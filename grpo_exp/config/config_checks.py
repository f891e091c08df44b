"""Stage 1 of the checks: what the composed config alone can tell, before anything is planned or built.

Hydra and the schema already rejected unknown group options, unknown keys and wrong types. What is
left here: values outside their range (with upper bounds, so that nothing is ever built from an
absurd size) or their set of choices, TRL's and transformers' own rules on combinations, the
reward functions, the LoRA targets and the deepspeed group. Rules that need the plan (world size,
placement) are planning/plan_rules.py; rules about this machine (GPUs, ports, files) are the launch
preflight, launching/preflight.py. Each check returns `Problem`s naming the full key, why and a fix.
Pure Python: no torch/transformers/trl import, except the LoRA and DeepSpeed checks (only when used).
"""

import dataclasses

from omegaconf import MISSING, DictConfig, OmegaConf

from grpo_exp import Problem, trackers
from grpo_exp.config import deepspeed_check, env, rules
from grpo_exp.config.errors import unknown_key
from grpo_exp.config.rewards import check_rewards
from grpo_exp.config.trl_schema import DICT_FIELDS, MODEL_TYPES
from grpo_exp.config.values import check_choices, check_ranges
from grpo_exp.core import plain, rundir
from grpo_exp.models import model_info

# vLLM's --kv-cache-dtype values for NVIDIA GPUs (vllm/config/cache.py CacheDType, without the vendor-specific ones)
# Keys the plan reads: when one of them is invalid, no plan is made (checks that need it are skipped).
PLAN_INPUTS = {
    "topology.nnodes",
    "topology.gpus_per_node",
    "topology.cpu_procs",
    "topology.node_rank",
    "vllm.gpus",
    "vllm.nodes",
    "vllm.tensor_parallel_size",
    "vllm.mode",
}


def check_required(cfg: DictConfig) -> list[Problem]:
    return [
        Problem(key, "is required and has no value", f"set it on the command line: {key}=...")
        for key in _missing(OmegaConf.to_container(cfg))
    ]


def _missing(node, prefix: str = ""):
    """The full keys of the values that are OmegaConf's MISSING ('???'), in the config's order: one walk of the plain
    container (OmegaConf.missing_keys reads every node through the config's own access, several times slower)."""
    for key, value in enumerate(node) if isinstance(node, list) else node.items():
        full = f"{prefix}[{key}]" if isinstance(node, list) else f"{prefix}.{key}" if prefix else str(key)
        if value == MISSING:
            yield full
        elif isinstance(value, (dict, list)):
            yield from _missing(value, full)


def check_unknown_keys(cfg: DictConfig, prefix: str = "") -> list[Problem]:
    """Keys added with `+key=value` (or by a YAML file) that the schema does not have."""
    schema = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(schema):
        return []
    fields = {f.name for f in dataclasses.fields(schema)}
    problems = []
    targeted = "_target_" in fields and cfg.get("_target_")  # Hydra's rule: the other keys go to the target
    for key in cfg.keys():
        full_key = f"{prefix}{key!s}"
        if key not in fields and not targeted:
            problems.append(unknown_key(full_key))
        elif OmegaConf.is_dict(cfg._get_node(key)):
            problems += check_unknown_keys(cfg[key], f"{full_key}.")
    return problems


TRL_LOGGED = ("loss", "reward", "reward_std", "entropy", "grad_norm", "learning_rate", "num_tokens", "kl")


def check_names(cfg: DictConfig) -> list[Problem]:
    """str fields that name something a library must know. The schema types them str, and OmegaConf turns
    any number or boolean given to a str field into its text, so `model.model_type=5` composes as '5'."""
    m, problems = cfg.model, []
    if m.model_type not in MODEL_TYPES and not cfg.trainer.trust_remote_code:
        problems.append(
            Problem(
                "model.model_type",
                f"'{m.model_type}' is not a model type transformers knows (its config.json's model_type)",
                "use model=auto (it reads config.json), or trainer.trust_remote_code=true for a model with own code",
            )
        )
    loader = cfg.data.loader
    if not isinstance(loader, DictConfig) or not isinstance(loader.get("_target_"), str):
        problems.append(
            Problem(
                "data.loader",
                f"is {OmegaConf.to_container(loader) if isinstance(loader, DictConfig) else loader!r}; it takes "
                "{_target_: <a function returning a datasets.Dataset>, ...its kwargs}",
                "pick a data option (data=toy_math|gsm8k|hf|jsonl|none), or data.loader._target_=my_pkg.load",
            )
        )
    metric = cfg.optimized_metric
    if metric not in rundir.OPTIMIZED_METRICS and "/" not in metric and metric not in TRL_LOGGED:
        problems.append(
            Problem(
                "optimized_metric",
                f"'{metric}' names no metric a run records",
                f"use one of {', '.join(rundir.OPTIMIZED_METRICS)}, or a summary.json key (memory/peak/train/...)",
            )
        )
    return problems


def check_mappings(cfg: DictConfig) -> list[Problem]:
    """GRPOConfig's dict fields are typed Any in the schema (so `key={a: 1}` composes): check here."""
    problems = []
    for key in DICT_FIELDS:
        value = OmegaConf.select(cfg, key)
        if value is not None and not isinstance(value, DictConfig):
            problems.append(
                Problem(key, f"is {value!r}; it takes a mapping", f"write {key}={{name: value, ...}} or null")
            )
    return problems


def check_lora(cfg: DictConfig) -> list[Problem]:
    """peft.target_modules against the layers of the model LoRA can adapt (model_info lists them)."""
    if not cfg.peft.enabled:
        return []
    if not cfg.peft.target_modules:
        return [
            Problem("peft.target_modules", "is empty: LoRA would train nothing", "list layers, e.g. [q_proj, v_proj]")
        ]
    known = model_info.lora_layer_names(cfg.model)
    unknown = [m for m in cfg.peft.target_modules if m not in known and m != "lm_head"]
    if unknown:
        return [
            Problem(
                "peft.target_modules",
                f"{unknown} are not layers LoRA adapts in {cfg.model.name} ({cfg.model.model_type}): PEFT's LoRA "
                "takes linear, embedding and convolution layers",
                f"choose from {[m for m in known if m != 'lm_head']}",
            )
        ]
    return []


# vllm.* keys only `vllm serve` takes: TRL builds the colocated engine itself, with its own values for them.
SERVER_ONLY = {
    "enforce_eager": False,
    "max_num_seqs": None,
    "max_num_batched_tokens": None,
    "kv_cache_dtype": "auto",
    "enable_prefix_caching": None,
    "kv_cache_memory_bytes": None,
}


def check_server_flags(cfg: DictConfig) -> list[Problem]:
    """The server's engine flags set in a mode without a server would silently do nothing."""
    if cfg.vllm.mode == "server":
        return []
    return [
        Problem(
            f"vllm.{key}",
            f"is {cfg.vllm[key]!r}, a flag of the vLLM server; with vllm.mode={cfg.vllm.mode} "
            + (
                "TRL builds the colocated engine itself (max_num_seqs = per-device batch x steps per generation, "
                "4096 batched tokens, CUDA graphs on) and takes no such setting"
                if cfg.vllm.mode == "colocate"
                else "there is no engine"
            ),
            f"use vllm=server, or leave vllm.{key} at {default!r}",
        )
        for key, default in SERVER_ONLY.items()
        if cfg.vllm[key] != default
    ]


def check_tensor_parallel(cfg: DictConfig) -> list[Problem]:
    """vLLM splits the attention heads over its tensor-parallel ranks (ModelConfig.verify_with_parallel_config): a
    size that does not divide them stops the engine as it starts, after the trainer has loaded its model."""
    tp, heads = cfg.vllm.tensor_parallel_size, cfg.model.num_attention_heads
    if cfg.vllm.mode == "off" or heads % tp == 0:
        return []
    sizes = [n for n in range(1, min(heads, 16) + 1) if heads % n == 0]
    return [
        Problem(
            "vllm.tensor_parallel_size",
            f"is {tp}, which does not divide {cfg.model.name}'s {heads} attention heads (vLLM: 'Total number of "
            f"attention heads ({heads}) must be divisible by tensor parallel size ({tp})')",
            f"use one of {sizes}",
        )
    ]


def check_deepspeed(cfg: DictConfig) -> list[Problem]:
    """The deepspeed group through DeepSpeed's own config models (pydantic, extra keys forbidden), and
    its top-level values against the trainer's, as transformers' integration compares them.
    Imports deepspeed (and torch, ~2 s), so only when the group is used."""
    if not cfg.deepspeed:
        return []

    ds = plain.mapping(cfg.deepspeed)
    return deepspeed_check.problems(ds) + deepspeed_check.against_trainer(ds, cfg.trainer)


def check_fsdp(cfg: DictConfig) -> list[Problem]:
    """FSDP2 with what cannot run beside it: a DeepSpeed stage (one sharding per run), two activation
    checkpointings (transformers refuses both), bitsandbytes layers (FSDP2 shards them only with a quant
    storage dtype grpo_exp does not set). CPU offload on CPU ranks is refused by the launch plan."""
    f = cfg.fsdp
    if not f.enabled:
        return []
    problems = []
    if cfg.deepspeed:
        stage = cfg.deepspeed.get("zero_optimization", {}).get("stage", "?")
        problems.append(
            Problem(
                "fsdp",
                f"fsdp={f.name} and a DeepSpeed config (ZeRO stage {stage}) both shard the model: one sharding per run",
                "keep one: deepspeed=none (FSDP2) or fsdp=none (DeepSpeed)",
            )
        )
    checkpointing = cfg.trainer.activation_checkpointing
    if checkpointing is None:
        checkpointing = cfg.trainer.gradient_checkpointing
    if f.activation_checkpointing and checkpointing:
        problems.append(
            Problem(
                "fsdp.activation_checkpointing",
                "is true beside trainer.gradient_checkpointing / activation_checkpointing: transformers refuses both",
                "trainer.gradient_checkpointing=false (FSDP's own saves the extra all-gather), or "
                "fsdp.activation_checkpointing=false",
            )
        )
    if cfg.model.get("quantization") is not None:
        problems.append(
            Problem(
                "fsdp",
                f"fsdp={f.name} with model.quantization: FSDP2 shards bitsandbytes layers only with a quant storage "
                "dtype, which grpo_exp neither sets nor plans",
                "peft=lora (16-bit base weights, sharded), or fsdp=none for QLoRA",
            )
        )
    return problems


def check_trackers(cfg: DictConfig) -> list[Problem]:
    """logger.also: trackers beside logger.name, each once, each one grpo_exp runs; logger._target_: a class with
    the Tracker protocol's methods, importable here as on rank 0."""
    if cfg.logger._target_ is not None and (missing := trackers.not_a_tracker(cfg.logger._target_)):
        return [Problem("logger._target_", missing, "name a class with log_dict(metrics, step) and close()")]
    also = list(cfg.logger.also)
    unknown = [t for t in also if t not in trackers.names()]
    if unknown:
        listed = ", ".join(trackers.names())
        return [Problem("logger.also", f"{unknown} are not trackers grpo_exp runs", f"list some of {listed}")]
    if cfg.logger.name in also or len(set(also)) < len(also):
        return [
            Problem("logger.also", f"{also} repeats a tracker (logger.name is {cfg.logger.name})", "name each once")
        ]
    return []


def check(cfg: DictConfig) -> list[Problem]:
    """Every stage-1 problem of `cfg`: the config alone, all at once."""
    problems = check_required(cfg) + check_unknown_keys(cfg)
    if problems:  # the remaining checks read these values
        return problems
    values = check_choices(cfg) + check_ranges(cfg) + check_mappings(cfg) + check_names(cfg)
    bad = {p.key for p in values}
    problems = values + rules.check_trl_rules(cfg) + check_rewards(cfg) + env.check(cfg) + env.check_data_none(cfg)
    problems += check_deepspeed(cfg)
    problems += check_server_flags(cfg) + check_fsdp(cfg) + check_trackers(cfg)
    if not bad & {"vllm.tensor_parallel_size", "model.num_attention_heads"}:
        problems += check_tensor_parallel(cfg)
    if not any(k.startswith(("peft.", "model.")) for k in bad):
        problems += check_lora(cfg)
    return problems
