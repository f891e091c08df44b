"""Stage 1 of the checks: what the composed config alone can tell, before anything is planned or built.

Hydra and the schema already rejected unknown group options, unknown keys and wrong types. What is
left here: values outside their range (with upper bounds, so that nothing is ever built from an
absurd size) or their set of choices, TRL's and transformers' own rules on combinations, the
reward functions, the LoRA targets and the deepspeed group. Rules that need the plan (world size,
placement) are planning/checks.py; rules about this machine (GPUs, ports, files) are the launch
preflight, launching/preflight.py. Each check returns `Problem`s naming the full key, why and a fix.
Pure Python: no torch/transformers/trl import, except the LoRA and DeepSpeed checks (only when used).
"""

import dataclasses
import inspect
import math

from omegaconf import DictConfig, OmegaConf

from grpo_exp import Problem, import_failure, is_number, locate, trackers
from grpo_exp.config import deepspeed_check, env, model_info, rules
from grpo_exp.config.errors import unknown_key
from grpo_exp.config.schema import DTYPES
from grpo_exp.config.trl_schema import CHOICES as ENUM_CHOICES
from grpo_exp.config.trl_schema import DICT_FIELDS, MODEL_TYPES
from grpo_exp.core import rundir

# vLLM's --kv-cache-dtype values for NVIDIA GPUs (vllm/config/cache.py CacheDType, without the vendor-specific ones)
VLLM_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
# Keys with a fixed set of values: grpo_exp's own, the str fields TRL checks only at run time (trl 1.16
# grpo_trainer.py: "Unknown loss type", "Invalid value for scale_rewards", ...; tests/config/test_checks.py
# keeps them equal to the options each field's help in the installed trl lists), and the enum-typed fields of
# GRPOConfig and those transformers gives argparse choices (generated, trl_schema.CHOICES).
CHOICES = {
    "action": ("run", "plan"),
    "vllm.mode": ("off", "colocate", "server"),
    "model.dtype": DTYPES,
    "launcher.kubernetes.kind": ("auto", "trainjob", "jobset"),
    "launcher.kubernetes.image_pull_policy": ("Always", "IfNotPresent", "Never"),
    "logger.name": lambda: (*trackers.names(), "none"),  # grpo_exp/trackers/: a module each, read when checked
    "logger.mode": ("auto", "online", "offline"),
    "logger.console": ("quiet", "full"),
    "preflight.on_oom": ("refuse", "warn", "fit"),
    "trainer.loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"),
    "trainer.scale_rewards": ("group", "batch", "none"),
    "trainer.importance_sampling_level": ("token", "sequence"),
    "trainer.multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm.importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
    "vllm.model_impl": ("vllm", "transformers"),
    "vllm.kv_cache_dtype": VLLM_KV_CACHE_DTYPES,
    "preflight.versions": ("refuse", "warn"),
    "fsdp.version": (2,),  # FSDP1 is deprecated in transformers, and planned nowhere here
    "fsdp.shard_group": ("world", "node"),
    "fsdp.state_dict_type": ("FULL_STATE_DICT", "SHARDED_STATE_DICT"),
    "fsdp.auto_wrap_policy": ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"),
    **ENUM_CHOICES,
}


def _at_least(low, high=2**53):
    return (lambda v: low <= v <= high), (f">= {low}" if high == 2**53 else f"in [{low}, {high}]")


def _above(low):
    return (lambda v: low < v <= 2**53), f"> {low}"


def _within(low, high, high_open=False):
    if high_open:
        return (lambda v: low <= v < high), f"in [{low}, {high})"
    return (lambda v: low <= v <= high), f"in [{low}, {high}]"


_PORT = (lambda v: 1 <= v <= 65535, "in [1, 65535] (a TCP port)")
_PROBABILITY_OPEN_LOW = (lambda v: 0 < v <= 1, "in (0, 1]")
_DIMENSION = _at_least(1, 2**24)  # a model width or count: anything larger is a typo, and would be built
_SIZE = _at_least(1, 2**24)  # tokens, batch sizes, processes: bounded before anything is sized by them
# Numeric ranges. A value outside one either makes TRL, transformers or torch raise inside every
# worker after launch (batch 0, temperature <= 0, a negative learning rate), hangs or exhausts the
# driver (a node plan for 10^30 nodes) or trains something meaningless; tests/config/test_checks.py checks
# the trainer rows against GRPOConfig and torch. Every other number must be finite and below 2^53.
RANGES = {
    "trainer.per_device_train_batch_size": _SIZE,
    "trainer.per_device_eval_batch_size": _SIZE,
    "trainer.gradient_accumulation_steps": _SIZE,
    "trainer.num_generations": _at_least(2, 2**16),  # advantages compare >= 2 completions of one prompt
    "trainer.num_generations_eval": _at_least(2, 2**16),
    "trainer.max_completion_length": _SIZE,
    "trainer.generation_batch_size": _at_least(1, 2**30),
    "trainer.steps_per_generation": _SIZE,
    "trainer.num_iterations": _SIZE,
    "trainer.learning_rate": _at_least(0),
    "trainer.temperature": _above(0),
    "trainer.top_p": _PROBABILITY_OPEN_LOW,
    "trainer.top_k": _at_least(0),
    "trainer.min_p": _within(0, 1),
    "trainer.repetition_penalty": _above(0),
    "trainer.beta": _at_least(0),
    "trainer.epsilon": _at_least(0),
    "trainer.epsilon_high": _at_least(0),
    "trainer.delta": _above(0),
    "trainer.max_grad_norm": _at_least(0),
    "trainer.weight_decay": _at_least(0),
    "trainer.warmup_steps": _at_least(0),
    "trainer.adam_beta1": _within(0, 1, high_open=True),
    "trainer.adam_beta2": _within(0, 1, high_open=True),
    "trainer.adam_epsilon": _at_least(0),
    "trainer.label_smoothing_factor": _within(0, 1),
    "trainer.num_train_epochs": _above(0),
    "trainer.max_steps": (lambda v: v == -1 or 1 <= v <= 2**53, "-1 (train num_train_epochs) or >= 1"),
    "trainer.logging_steps": _above(0),
    "trainer.save_steps": _above(0),
    "trainer.eval_steps": _above(0),
    "trainer.save_total_limit": _at_least(1),
    "trainer.torch_empty_cache_steps": _at_least(1),  # transformers: "must be an integer bigger than 0"
    "trainer.dataloader_num_workers": _at_least(0, 1024),
    "trainer.top_entropy_quantile": _within(0, 1),
    "trainer.ref_model_mixup_alpha": _within(0, 1),
    "trainer.ref_model_sync_steps": _at_least(1),
    "trainer.num_completions_to_print": _at_least(0),
    "vllm.gpu_memory_utilization": _PROBABILITY_OPEN_LOW,
    "vllm.tensor_parallel_size": _at_least(1, 1024),
    "vllm.gpus": _at_least(0, 1024),
    "vllm.nodes": _at_least(0, 4096),
    "vllm.max_model_length": _SIZE,
    "vllm.max_num_seqs": _SIZE,
    "vllm.max_num_batched_tokens": _SIZE,
    "vllm.kv_cache_memory_bytes": _at_least(1, 2**50),
    "vllm.server_timeout": _above(0),
    "vllm.importance_sampling_clip_max": _above(0),
    "vllm.importance_sampling_clip_min": _at_least(0),
    "data.max_prompt_length": _SIZE,
    "data.num_samples": _at_least(1, 2**40),
    "model.hidden_size": _DIMENSION,
    "model.intermediate_size": _DIMENSION,
    "model.num_hidden_layers": _at_least(1, 2**16),
    "model.num_attention_heads": _at_least(1, 2**16),
    "model.num_key_value_heads": _at_least(1, 2**16),
    "model.head_dim": _at_least(1, 2**16),
    "model.vocab_size": _DIMENSION,
    "model.max_position_embeddings": _at_least(1, 2**30),
    "model.num_parameters": _at_least(1, 10**14),
    "topology.nnodes": _at_least(1, 4096),
    "topology.gpus_per_node": _at_least(0, 1024),
    "topology.gpu_memory_gib": (lambda v: 0 < v <= 2**20, "in (0, 1048576]"),
    "topology.cpu_procs": _at_least(1, 1024),
    "topology.node_rank": _at_least(0, 4095),
    "topology.master_port": _PORT,
    "topology.rendezvous_timeout_s": _above(0),
    "topology.host_memory_gib": (lambda v: 0 < v <= 2**24, "in (0, 16777216]"),
    "topology.collective_timeout_s": _above(0),
    "peft.r": _at_least(1, 2**16),
    "peft.lora_alpha": _above(0),
    "peft.lora_dropout": _within(0, 1, high_open=True),
    "memory.limit_gib": _above(0),
    "watchdog.stall_s": _above(0),
    "preemption.grace_s": _at_least(0),
    "launcher.slurm.time_min": _at_least(1),
    "launcher.slurm.cpus_per_task": _at_least(1, 4096),
    "launcher.slurm.mem_gb": _at_least(1),
    "launcher.slurm.signal_delay_s": _at_least(1),
    "launcher.slurm.max_requeues": _at_least(0, 1000),
    "launcher.slurm.max_parallel": _at_least(1, 4096),
    "launcher.kubernetes.cpus_per_process": _at_least(1, 1024),
    "launcher.kubernetes.memory_headroom": _at_least(1, 100),
    "launcher.kubernetes.max_restarts": _at_least(0, 1000),
    "launcher.kubernetes.poll_s": _above(0),
}
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


def _flat_numbers(node, prefix: str = ""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _flat_numbers(value, f"{prefix}{key}.")
        elif is_number(value):
            yield f"{prefix}{key}", value


def check_required(cfg: DictConfig) -> list[Problem]:
    return [
        Problem(key, "is required and has no value", f"set it on the command line: {key}=...")
        for key in OmegaConf.missing_keys(cfg)
    ]


def check_unknown_keys(cfg: DictConfig, prefix: str = "") -> list[Problem]:
    """Keys added with `+key=value` (or by a YAML file) that the schema does not have."""
    schema = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(schema):
        return []
    fields = {f.name for f in dataclasses.fields(schema)}
    problems = []
    for key in cfg.keys():
        full_key = f"{prefix}{key}"
        if key not in fields:
            problems.append(unknown_key(full_key))
        elif OmegaConf.is_dict(cfg._get_node(key)):
            problems += check_unknown_keys(cfg[key], f"{full_key}.")
    return problems


def check_choices(cfg: DictConfig) -> list[Problem]:
    problems = []
    for key, allowed in CHOICES.items():
        allowed = allowed() if callable(allowed) else allowed  # a component list: read when checked
        value = OmegaConf.select(cfg, key)
        if value is not None and value not in allowed:
            problems.append(
                Problem(key, f"'{value}' is not a valid option", f"use one of: {', '.join(map(str, allowed))}")
            )
    return problems


def check_ranges(cfg: DictConfig) -> list[Problem]:
    problems = []
    for key, (ok, wanted) in RANGES.items():
        value = OmegaConf.select(cfg, key)
        if not is_number(value):  # null = unset; other types are the schema's job
            continue
        if not math.isfinite(value) or not ok(value):
            problems.append(Problem(key, f"is {value:.6g}; it must be {wanted}", f"set {key} to a value {wanted}"))
    bounded = set(RANGES)
    for key, value in _flat_numbers(OmegaConf.to_container(cfg, resolve=True)):
        if key not in bounded and not key.startswith("hydra.") and (not math.isfinite(value) or abs(value) > 2**53):
            problems.append(
                Problem(
                    key, f"is {value:.6g}; numbers must be finite and at most 2^53", f"set {key} to a realistic value"
                )
            )
    return problems


# Metrics TRL logs under a plain name (final_metrics of summary.json), beside the keys with a "/"
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


def active_rewards(data: DictConfig) -> dict:
    """data.rewards without the entries set to null: `data.rewards.<name>=null` removes a reward an
    option ships (an imported recipe replaces data=hf's rewards this way)."""
    return {name: node for name, node in data.rewards.items() if node is not None}


def check_rewards(cfg: DictConfig) -> list[Problem]:
    problems = []
    rewards = active_rewards(cfg.data)
    if not rewards and not env.owns_reward(cfg):  # an environment with get_reward is TRL's other reward source
        problems.append(
            Problem(
                "data.rewards",
                "no reward function is configured",
                "add one: +data.rewards.correctness._target_=grpo_exp.training.rewards.correctness, or give the set "
                "whole: 'data.rewards={correctness: {_target_: grpo_exp.training.rewards.correctness}}', or an "
                "environment with get_reward() (env.factory='{_target_: pkg.MyEnv}')",
            )
        )
    for name, node in rewards.items():
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not callable(locate(target)):
            problems.append(
                Problem(
                    f"data.rewards.{name}._target_",
                    f"'{target}' is not an importable function ({import_failure(target)})",
                    "name a function such as grpo_exp.training.rewards.correctness",
                )
            )
    weights = cfg.trainer.reward_weights
    if weights is not None and len(weights) != len(rewards):
        problems.append(
            Problem(
                "trainer.reward_weights",
                f"has {len(weights)} weights for {len(rewards)} reward functions ({', '.join(rewards)})",
                f"give one weight per data.rewards entry (trainer.reward_weights=[{', '.join(['1.0'] * len(rewards))}])"
                ", or trainer.reward_weights=null (an environment's get_reward() takes weight 1 after them)",
            )
        )
    return problems


# Arguments TRL itself passes to every reward function; any other required one is a dataset column.
TRL_REWARD_ARGUMENTS = {
    "prompts",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
}


def reward_columns(cfg: DictConfig) -> dict[str, list[str]]:
    """Per reward name, the dataset columns it needs: its required parameters that TRL does not
    supply and the config does not bind (TRL passes every column as a keyword argument)."""
    needed = {}
    for name, node in active_rewards(cfg.data).items():
        func = locate(node._target_)
        if not callable(func):
            continue  # check_rewards reports it
        bound = set(node) - {"_target_"}
        params = inspect.signature(func).parameters.values()
        needed[name] = [
            p.name
            for p in params
            if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in TRL_REWARD_ARGUMENTS
            and p.name not in bound
        ]
    return needed


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


def check_deepspeed(cfg: DictConfig) -> list[Problem]:
    """The deepspeed group through DeepSpeed's own config models (pydantic, extra keys forbidden), and
    its top-level values against the trainer's, as transformers' integration compares them.
    Imports deepspeed (and torch, ~2 s), so only when the group is used."""
    if not cfg.deepspeed:
        return []

    ds = OmegaConf.to_container(cfg.deepspeed, resolve=True)
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
    """logger.also: trackers beside logger.name, each once, each one grpo_exp runs."""
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
    if not any(k.startswith(("peft.", "model.")) for k in bad):
        problems += check_lora(cfg)
    return problems
