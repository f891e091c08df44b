"""Every check on the composed config that Hydra's schema cannot make, before anything is launched.

Hydra and the schema already rejected unknown keys, unknown group options and wrong types. What is
left: values outside their range or their set of choices, rules that span keys or groups (TRL's
batch rules against the world size the run will have), the data files, the reward functions, and
what this machine can run. Each check returns `Problem`s naming the full key, why and a fix; all of
them are reported at once, so a user fixes everything in one go.
Pure Python: no torch/transformers/trl import on this path.
"""

import dataclasses
import inspect
import math
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import is_local_path
from grpo_exp.config import model_info
from grpo_exp.config.errors import Problem, unknown_key
from grpo_exp.config.trl_schema import CHOICES as ENUM_CHOICES
from grpo_exp.config.trl_schema import DICT_FIELDS
from grpo_exp.launching import ports
from grpo_exp.planning import placement
from grpo_exp.training import data

DTYPES = ("bfloat16", "float16", "float32", "auto")
# Keys with a fixed set of values: grpo_exp's own, the str fields TRL checks only at run time
# (trl 1.16 grpo_trainer.py: "Unknown loss type", "Invalid value for scale_rewards", ...), and
# the enum-typed fields of GRPOConfig (generated, trl_schema.CHOICES).
CHOICES = {
    "action": ("run", "plan"),
    "vllm.mode": ("off", "colocate", "server"),
    "model.dtype": DTYPES,
    "data.loader": tuple(sorted(data.LOADERS)),
    "launcher.name": ("local", "slurm"),
    "logger.mode": ("auto", "online", "offline"),
    "logger.console": ("quiet", "full"),
    "preflight.on_oom": ("refuse", "warn", "fit"),
    "trainer.loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"),
    "trainer.scale_rewards": ("group", "batch", "none"),
    "trainer.importance_sampling_level": ("token", "sequence"),
    "trainer.multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm.importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
    "vllm.model_impl": ("vllm", "transformers"),
    **ENUM_CHOICES,
}


def _at_least(low):
    return lambda v: v >= low, f">= {low}"


def _above(low):
    return lambda v: v > low, f"> {low}"


def _within(low, high, high_open=False):
    return (lambda v: low <= v < high, f"in [{low}, {high})") if high_open else (lambda v: low <= v <= high, f"in [{low}, {high}]")


_PORT = (lambda v: 1 <= v <= 65535, "in [1, 65535] (a TCP port)")
_PROBABILITY_OPEN_LOW = (lambda v: 0 < v <= 1, "in (0, 1]")
# Numeric ranges. A value outside one either makes TRL, transformers or torch raise inside every
# worker after launch (batch 0, temperature <= 0, a negative learning rate) or trains something
# meaningless; tests/test_validate.py checks the trainer rows against GRPOConfig and torch.
RANGES = {
    "trainer.per_device_train_batch_size": _at_least(1),
    "trainer.per_device_eval_batch_size": _at_least(1),
    "trainer.gradient_accumulation_steps": _at_least(1),
    "trainer.num_generations": _at_least(2),  # advantages compare >= 2 completions of one prompt
    "trainer.num_generations_eval": _at_least(2),
    "trainer.max_completion_length": _at_least(1),
    "trainer.generation_batch_size": _at_least(1),
    "trainer.steps_per_generation": _at_least(1),
    "trainer.num_iterations": _at_least(1),
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
    "trainer.max_steps": (lambda v: v == -1 or v >= 1, "-1 (train num_train_epochs) or >= 1"),
    "trainer.logging_steps": _above(0),
    "trainer.save_steps": _above(0),
    "trainer.eval_steps": _above(0),
    "trainer.save_total_limit": _at_least(1),
    "trainer.dataloader_num_workers": _at_least(0),
    "trainer.top_entropy_quantile": _within(0, 1),
    "trainer.ref_model_mixup_alpha": _within(0, 1),
    "trainer.ref_model_sync_steps": _at_least(1),
    "trainer.num_completions_to_print": _at_least(0),
    "vllm.gpu_memory_utilization": _PROBABILITY_OPEN_LOW,
    "vllm.tensor_parallel_size": _at_least(1),
    "vllm.gpus": _at_least(0),
    "vllm.max_model_length": _at_least(1),
    "vllm.server_timeout": _above(0),
    "vllm.importance_sampling_clip_max": _above(0),
    "vllm.importance_sampling_clip_min": _at_least(0),
    "data.max_prompt_length": _at_least(1),
    "data.num_samples": _at_least(1),
    "topology.nnodes": _at_least(1),
    "topology.gpus_per_node": _at_least(0),
    "topology.gpu_memory_gib": _above(0),
    "topology.cpu_procs": _at_least(1),
    "topology.master_port": _PORT,
    "topology.rendezvous_timeout_s": _above(0),
    "topology.collective_timeout_s": _above(0),
    "peft.r": _at_least(1),
    "peft.lora_alpha": _above(0),
    "peft.lora_dropout": _within(0, 1, high_open=True),
    "memory.limit_gib": _above(0),
    "watchdog.stall_s": _above(0),
    "launcher.slurm.time_min": _at_least(1),
    "launcher.slurm.cpus_per_task": _at_least(1),
    "launcher.slurm.mem_gb": _at_least(1),
    "launcher.slurm.signal_delay_s": _at_least(1),
    "launcher.slurm.max_requeues": _at_least(0),
    "launcher.slurm.max_parallel": _at_least(1),
}
# Below this, a CPU worker cannot even start: torch, gloo's threads and their stacks take ~1.5 GiB
# of address space, which RLIMIT_DATA counts.
CPU_MIN_LIMIT_GIB = 2.0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_required(cfg: DictConfig) -> list[Problem]:
    return [Problem(key, "is required and has no value", f"set it on the command line: {key}=...") for key in OmegaConf.missing_keys(cfg)]


def check_unknown_keys(cfg: DictConfig, prefix: str = "") -> list[Problem]:
    """Keys added with `+key=value` that the schema does not have (Hydra lets `+` add them)."""
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
        value = OmegaConf.select(cfg, key)
        if value is not None and value not in allowed:
            problems.append(Problem(key, f"'{value}' is not a valid option", f"use one of: {', '.join(map(str, allowed))}"))
    return problems


def check_ranges(cfg: DictConfig) -> list[Problem]:
    problems = []
    for key, (ok, wanted) in RANGES.items():
        value = OmegaConf.select(cfg, key)
        if not _is_number(value):  # null = unset; other types are the schema's job
            continue
        if not math.isfinite(value) or not ok(value):
            problems.append(Problem(key, f"is {value}; it must be {wanted}", f"set {key} to a value {wanted}"))
    return problems


def check_mappings(cfg: DictConfig) -> list[Problem]:
    """GRPOConfig's dict fields are typed Any in the schema (so `key={a: 1}` composes): check here."""
    problems = []
    for key in DICT_FIELDS:
        value = OmegaConf.select(cfg, key)
        if value is not None and not isinstance(value, DictConfig):
            problems.append(Problem(key, f"is {value!r}; it takes a mapping", f"write {key}={{name: value, ...}} or null"))
    return problems


def check_trl_rules(cfg: DictConfig) -> list[Problem]:
    """Combinations GRPOConfig or GRPOTrainer refuse inside every worker (trl 1.16), checked here."""
    t, v = cfg.trainer, cfg.vllm
    problems = []
    if t.sync_ref_model and t.beta == 0:
        problems.append(
            Problem(
                "trainer.sync_ref_model",
                "is true while trainer.beta is 0: no reference model is loaded, so there is nothing to sync (TRL refuses it)",
                "set trainer.beta > 0 (e.g. 0.04), or trainer.sync_ref_model=false",
            )
        )
    if t.sync_ref_model and cfg.peft.enabled:
        problems.append(Problem("trainer.sync_ref_model", "is not supported with LoRA: the reference model is the frozen base (TRL refuses it)", "set trainer.sync_ref_model=false, or peft=none"))
    if t.auto_find_batch_size:
        problems.append(
            Problem(
                "trainer.auto_find_batch_size",
                "would break GRPO's prompt groups when it halves the batch (TRL refuses it)",
                "set it false; preflight.on_oom=fit shrinks the batch and keeps the groups",
            )
        )
    if t.log_completions_hub_repo is not None and not t.log_completions:
        problems.append(Problem("trainer.log_completions_hub_repo", "is set while trainer.log_completions is false", "set trainer.log_completions=true, or null the repo"))
    if t.eval_strategy != "no" or t.do_eval:
        problems.append(
            Problem(
                "trainer.eval_strategy",
                f"is '{t.eval_strategy}', but grpo_exp builds no eval dataset yet (GRPOTrainer needs one to evaluate)",
                "set trainer.eval_strategy=no and trainer.do_eval=false",
            )
        )
    low, high = v.importance_sampling_clip_min, v.importance_sampling_clip_max
    if low is not None and high is not None and low >= high:
        problems.append(Problem("vllm.importance_sampling_clip_min", f"{low} is not below vllm.importance_sampling_clip_max {high}", "make clip_min < clip_max"))
    if v.mode != "off" and v.importance_sampling_correction and v.importance_sampling_mode.endswith("_truncate") and low is None and high is None:
        problems.append(
            Problem(
                "vllm.importance_sampling_clip_max",
                f"is null, but vllm.importance_sampling_mode={v.importance_sampling_mode} needs a bound",
                "set vllm.importance_sampling_clip_max (TRL's default is 3.0)",
            )
        )
    if "dtype" in (t.model_init_kwargs or {}):
        problems.append(Problem("trainer.model_init_kwargs.dtype", "is set by model.dtype (the planner sizes weights by it)", "use model.dtype=..."))
    if cfg.peft.enabled and "lm_head" in cfg.peft.target_modules:
        problems.append(
            Problem(
                "peft.target_modules",
                "includes lm_head: TRL computes log-probs from lm_head.weight directly, so an adapter there would never train (TRL refuses it)",
                "remove lm_head from peft.target_modules",
            )
        )
    return problems


def check_rewards(cfg: DictConfig) -> list[Problem]:
    from hydra.utils import get_method

    problems = []
    if not cfg.data.rewards:
        problems.append(Problem("data.rewards", "no reward function is configured", "add one, e.g. +data.rewards.correctness._target_=grpo_exp.training.rewards.correctness"))
    for name, node in cfg.data.rewards.items():
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        try:
            get_method(target)
        except Exception:
            problems.append(Problem(f"data.rewards.{name}._target_", f"'{target}' is not an importable function", "name a function such as grpo_exp.training.rewards.correctness"))
    weights = cfg.trainer.reward_weights
    if weights is not None and len(weights) != len(cfg.data.rewards):
        problems.append(
            Problem(
                "trainer.reward_weights", f"has {len(weights)} weights for {len(cfg.data.rewards)} reward functions ({', '.join(cfg.data.rewards)})", "give one weight per data.rewards entry, or null"
            )
        )
    return problems


# Arguments TRL itself passes to every reward function; any other required one is a dataset column.
TRL_REWARD_ARGUMENTS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}


def reward_columns(cfg: DictConfig) -> dict[str, list[str]]:
    """Per reward name, the dataset columns it needs: its required parameters that TRL does not
    supply and the config does not bind (TRL passes every column as a keyword argument)."""
    from hydra.utils import get_method

    needed = {}
    for name, node in cfg.data.rewards.items():
        try:
            func = get_method(node._target_)
        except Exception:
            continue  # check_rewards reports it
        bound = set(node) - {"_target_"}
        params = inspect.signature(func).parameters.values()
        needed[name] = [
            p.name for p in params if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in TRL_REWARD_ARGUMENTS and p.name not in bound
        ]
    return needed


def check_calibration(cfg: DictConfig) -> list[Problem]:
    path = cfg.preflight.calibration
    if not path:
        return []
    from grpo_exp.planning import calibration

    try:
        calibration.load(path)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        return [Problem("preflight.calibration", f"cannot be read: {exc}", "give a file written by python -m grpo_exp.calibrate <measured run dirs>, or null")]
    return []


def check_model_path(cfg: DictConfig) -> list[Problem]:
    model = cfg.model.name_or_path
    if model and is_local_path(model) and not (Path(model).expanduser() / "config.json").is_file():
        return [Problem("model.name_or_path", f"{model} is not a saved HF model directory (no config.json)", "point it at a directory written by save_pretrained, or use a hub id")]
    return []


def generation_batch_size(cfg: DictConfig, world_size: int) -> int:
    """Completions per generation batch, as GRPOConfig derives it when it is not set."""
    t = cfg.trainer
    if t.generation_batch_size is not None:
        return t.generation_batch_size
    return t.per_device_train_batch_size * world_size * (t.steps_per_generation or t.gradient_accumulation_steps)


def check_batch(cfg: DictConfig, world_size: int) -> list[Problem]:
    """TRL's batch rules, checked against the world size this run will have (GRPOConfig only
    checks them inside each process, after launch)."""
    t = cfg.trainer
    if t.generation_batch_size is not None and t.steps_per_generation is not None:
        return [Problem("trainer.generation_batch_size", "and trainer.steps_per_generation are both set; TRL derives one from the other", "set only one of them (null the other)")]
    micro = t.per_device_train_batch_size * world_size
    if t.generation_batch_size is not None and t.generation_batch_size % micro:
        return [Problem("trainer.generation_batch_size", f"{t.generation_batch_size} is not a multiple of per_device_train_batch_size x world size = {micro}", f"use a multiple of {micro}")]
    generation_batch = generation_batch_size(cfg, world_size)
    if generation_batch % t.num_generations:
        fits = [g for g in range(2, generation_batch + 1) if generation_batch % g == 0]
        return [
            Problem(
                "trainer.num_generations",
                f"{t.num_generations} does not divide the generation batch {generation_batch} "
                f"(per_device_train_batch_size {t.per_device_train_batch_size} x world size {world_size} x steps_per_generation "
                f"{t.steps_per_generation or t.gradient_accumulation_steps}); every prompt needs all its completions in one batch",
                f"trainer.num_generations in {fits}, or a per_device_train_batch_size/steps_per_generation that makes the batch a multiple of {t.num_generations}",
            )
        ]
    return []


def check_lora(cfg: DictConfig) -> list[Problem]:
    """peft.target_modules against the linear layers the model really has (model_info lists them)."""
    if not cfg.peft.enabled:
        return []
    if not cfg.peft.target_modules:
        return [Problem("peft.target_modules", "is empty: LoRA would train nothing", "list linear layers, e.g. [q_proj, v_proj]")]
    known = model_info.linear_layer_names(cfg.model)
    unknown = [m for m in cfg.peft.target_modules if m not in known and m != "lm_head"]
    if unknown:
        return [Problem("peft.target_modules", f"{unknown} are not linear layers of {cfg.model.name} ({cfg.model.model_type})", f"choose from {[m for m in known if m != 'lm_head']}")]
    return []


def check_topology(cfg: DictConfig, plan) -> list[Problem]:
    """Placement rules any machine can check (action=plan runs these too)."""
    topo, v = cfg.topology, cfg.vllm
    problems = []
    if not 0 <= topo.node_rank < topo.nnodes:
        problems.append(Problem("topology.node_rank", f"is {topo.node_rank}, outside 0..{topo.nnodes - 1}", "set topology.node_rank (or NODE_RANK) to this node's index"))
    if v.nodes:
        problems += check_serving_nodes(cfg, plan)
    elif v.mode == "server":
        gpus = v.gpus or 1
        if plan.gpus_per_node == 0 and placement.standin_server() is None:
            problems.append(Problem("vllm.mode", "server mode needs GPUs; this topology has none", "use vllm=off on CPU"))
        elif plan.gpus_per_node == 0:
            pass  # the CPU rehearsal's stand-in server
        elif gpus % v.tensor_parallel_size:
            problems.append(Problem("vllm.gpus", f"is {gpus}; the server needs a positive multiple of vllm.tensor_parallel_size={v.tensor_parallel_size}", f"set vllm.gpus={v.tensor_parallel_size}"))
        elif gpus >= plan.gpus_per_node:
            problems.append(
                Problem(
                    "vllm.gpus",
                    f"reserves {gpus} of node 0's {plan.gpus_per_node} GPUs, leaving none to train",
                    f"set vllm.gpus below {plan.gpus_per_node}, use vllm.nodes=1 with a node that only serves, or vllm=colocate",
                )
            )
        if cfg.model.name_or_path is None:
            problems.append(Problem("vllm.mode", "the vLLM server loads the model by name; the tiny model has none", "use a real model (model=qwen0.5b) or vllm=off"))
    if v.mode == "colocate" and plan.world_size % v.tensor_parallel_size:
        problems.append(
            Problem("vllm.tensor_parallel_size", f"{v.tensor_parallel_size} does not divide the world size {plan.world_size}; colocated vLLM groups ranks by it", "use a divisor of the world size")
        )
    if v.mode != "off" and v.max_model_length is not None and cfg.data.max_prompt_length is not None:
        needed = cfg.data.max_prompt_length + cfg.trainer.max_completion_length
        if v.max_model_length < needed:
            problems.append(
                Problem(
                    "vllm.max_model_length",
                    f"{v.max_model_length} < data.max_prompt_length + trainer.max_completion_length = {needed}",
                    f"set vllm.max_model_length={needed} (or shorten prompts/completions)",
                )
            )
    return problems


def check_serving_nodes(cfg: DictConfig, plan) -> list[Problem]:
    """vllm.nodes: the last node serves with all its GPUs (TRL's 4+1 layout for large models)."""
    v, nnodes, gpus = cfg.vllm, cfg.topology.nnodes, plan.gpus_per_node
    if v.mode != "server":
        return [Problem("vllm.nodes", f"is {v.nodes}, but dedicated serving nodes run `trl vllm-serve` (vllm.mode is {v.mode})", "set vllm=server, or vllm.nodes=0")]
    if v.nodes > 1:
        return [
            Problem(
                "vllm.nodes",
                f"is {v.nodes}; TRL 1.16's vLLM client talks to one server (one host and port), so requests cannot be spread over several serving nodes",
                "set vllm.nodes=1: one node serves, data parallel over its GPUs",
            )
        ]
    if v.nodes >= nnodes:
        return [
            Problem(
                "vllm.nodes",
                f"{v.nodes} serving node(s) of topology.nnodes={nnodes} leaves no node to train",
                f"set topology.nnodes={v.nodes + 1} or more, or vllm.nodes=0 (the server on node 0's GPUs)",
            )
        ]
    problems = []
    if gpus and gpus % v.tensor_parallel_size:
        problems.append(Problem("vllm.tensor_parallel_size", f"{v.tensor_parallel_size} does not divide the serving node's {gpus} GPUs", f"use a divisor of {gpus}"))
    if v.gpus is not None and v.gpus != gpus:
        problems.append(
            Problem("vllm.gpus", f"is {v.gpus}, but with vllm.nodes=1 the serving node serves on all its {gpus} GPUs", "set vllm.gpus=null, or vllm.nodes=0 to serve on vllm.gpus of node 0")
        )
    if gpus == 0 and placement.standin_server() is None:
        problems.append(Problem("vllm.nodes", "a serving node needs GPUs; this topology has none", "use vllm=off on CPU"))
    return problems


def check_machine(cfg: DictConfig, plan, gpus: int) -> list[Problem]:
    """What this machine can run: action=run starts this node's share here."""
    problems = []
    wanted = cfg.topology.gpus_per_node
    if wanted is not None and wanted > gpus:
        problems.append(Problem("topology.gpus_per_node", f"asks for {wanted} GPUs; this machine has {gpus}", "use topology=local (adapts to this machine), or action=plan to only plan"))
    if cfg.vllm.mode != "off" and gpus == 0 and placement.standin_server() is None:
        problems.append(Problem("vllm.mode", f"'{cfg.vllm.mode}' needs a CUDA GPU (vLLM cannot train on CPU); this machine has none", "use vllm=off here, or action=plan to only plan"))
    if cfg.vllm.nodes and cfg.launcher.name == "local" and cfg.vllm.server_host is None:
        problems.append(
            Problem(
                "vllm.server_host",
                f"is required with vllm.nodes=1 and launcher=local: the trainers reach the serving node (node {cfg.topology.nnodes - 1}) there, and it listens there",
                "set vllm.server_host=<the serving node's address> on every node (launcher=slurm fills it in from the job's hosts)",
            )
        )
    return problems + ports.check_busy(cfg, cfg.topology.node_rank, plan.vllm.get("server_node"))


def check_memory_limit(cfg: DictConfig, plan) -> list[Problem]:
    limit = cfg.memory.limit_gib
    if plan.device == "cpu" and _is_number(limit) and 0 < limit < CPU_MIN_LIMIT_GIB:
        return [
            Problem(
                "memory.limit_gib",
                f"is {limit} GiB; a CPU worker needs ~1.5 GiB of address space (RLIMIT_DATA counts thread stacks) just to start torch and gloo",
                f"set memory.limit_gib >= {CPU_MIN_LIMIT_GIB:g}",
            )
        ]
    return []


def check_deepspeed(cfg: DictConfig) -> list[Problem]:
    """The deepspeed group through DeepSpeed's own config models (pydantic, extra keys forbidden).
    Imports deepspeed (and torch, ~2 s), so only when the group is used."""
    if not cfg.deepspeed:
        return []
    from grpo_exp.config import deepspeed_check

    return deepspeed_check.problems(OmegaConf.to_container(cfg.deepspeed, resolve=True))


# Keys each cross-group check reads: it runs only when these passed their range and choice checks
# (a rule over a batch of 0 says nothing useful), so one report still holds every real problem.
_BATCH_INPUTS = {
    "trainer.per_device_train_batch_size",
    "trainer.gradient_accumulation_steps",
    "trainer.num_generations",
    "trainer.generation_batch_size",
    "trainer.steps_per_generation",
    "topology.nnodes",
    "topology.cpu_procs",
    "topology.gpus_per_node",
    "vllm.gpus",
    "vllm.tensor_parallel_size",
    "vllm.mode",
}


def validate(cfg: DictConfig, plan, gpus: int) -> list[Problem]:
    """Every problem with `cfg` for `plan`, on a machine with `gpus` GPUs (machine checks only
    for action=run: a plan can be made anywhere)."""
    problems = check_required(cfg) + check_unknown_keys(cfg)
    if problems:  # the remaining checks read these values
        return problems
    values = check_choices(cfg) + check_ranges(cfg) + check_mappings(cfg)
    bad = {p.key for p in values}
    problems = values + check_trl_rules(cfg) + check_model_path(cfg) + check_calibration(cfg) + check_rewards(cfg) + check_deepspeed(cfg)
    batch_known = not bad & _BATCH_INPUTS
    rows_checkable = batch_known and "data.num_samples" not in bad and cfg.action == "run"  # a plan sizes memory: no data needed
    prompts_per_batch = generation_batch_size(cfg, plan.world_size) // cfg.trainer.num_generations if rows_checkable else None
    problems += data.preflight(cfg.data, reward_columns(cfg), prompts_per_batch)
    if not bad & {"peft.r", "model.dtype"}:
        problems += check_lora(cfg)
    if not any(k.startswith(("topology.", "vllm.")) for k in bad):
        problems += check_topology(cfg, plan) + check_memory_limit(cfg, plan)
        if cfg.action == "run":
            problems += check_machine(cfg, plan, gpus)
    if batch_known:
        problems += check_batch(cfg, plan.world_size)
    return problems
