"""Cross-group checks on the composed config, before anything is launched.

Hydra and the schema already rejected unknown keys, unknown group options and wrong types. What is
left are rules that span groups or depend on the machine: each check returns `Problem`s naming the
full config key, why it is wrong and a fix, and all of them are reported at once.
Pure Python: no torch/transformers/trl import on this path.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import data

ACTIONS = ("run", "plan")
LAUNCHERS = ("local", "slurm")
VLLM_MODES = ("off", "colocate", "server")
DTYPES = ("bfloat16", "float16", "float32", "auto")
# Linear layers LoRA can target, per transformers model_type (names from the modeling files).
_LLAMA_LIKE = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
LINEAR_MODULES = {"qwen2": _LLAMA_LIKE, "qwen3": _LLAMA_LIKE, "llama": _LLAMA_LIKE}


@dataclass(frozen=True)
class Problem:
    key: str  # full config key, e.g. trainer.num_generations
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.why}\n    fix: {self.fix}"


def _one_of(key: str, value, allowed) -> list[Problem]:
    if value in allowed:
        return []
    return [Problem(key, f"'{value}' is not a valid option", f"use one of: {', '.join(map(str, allowed))}")]


def check_required(cfg: DictConfig) -> list[Problem]:
    return [
        Problem(key, "is required and has no value", f"set it on the command line: {key}=...")
        for key in OmegaConf.missing_keys(cfg)
    ]


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
            problems.append(Problem(full_key, "unknown key", f"use one of: {', '.join(sorted(fields))}"))
        elif OmegaConf.is_dict(cfg._get_node(key)):
            problems += check_unknown_keys(cfg[key], f"{full_key}.")
    return problems


def check_choices(cfg: DictConfig) -> list[Problem]:
    return (
        _one_of("action", cfg.action, ACTIONS)
        + _one_of("vllm.mode", cfg.vllm.mode, VLLM_MODES)
        + _one_of("model.dtype", cfg.model.dtype, DTYPES)
        + _one_of("data.loader", cfg.data.loader, sorted(data.LOADERS))
        + _one_of("model.model_type", cfg.model.model_type, sorted(LINEAR_MODULES))
        + _one_of("launcher.name", cfg.launcher.name, LAUNCHERS)
        + _one_of("preflight.on_oom", cfg.preflight.on_oom, ("refuse", "warn"))
    )


def check_local_paths(cfg: DictConfig) -> list[Problem]:
    problems = []
    path = cfg.data.path
    if path is None and cfg.data.loader in ("gsm8k", "jsonl"):
        problems.append(Problem("data.path", f"is required for data.loader={cfg.data.loader}", "set data.path=/path/to/train.jsonl (or a hub dataset id for gsm8k)"))
    if path and path.endswith((".json", ".jsonl")) and not Path(path).is_file():
        problems.append(Problem("data.path", f"file {path} does not exist", "point data.path at an existing .json/.jsonl file"))
    model = cfg.model.name_or_path
    if model and model.startswith(("/", "./", "../", "~")) and not (Path(model).expanduser() / "config.json").is_file():
        problems.append(Problem("model.name_or_path", f"{model} is not a saved HF model directory (no config.json)", "point it at a directory written by save_pretrained, or use a hub id"))
    return problems


def check_rewards(cfg: DictConfig) -> list[Problem]:
    from hydra.utils import get_method

    problems = []
    if not cfg.data.rewards:
        problems.append(Problem("data.rewards", "no reward function is configured", "add one, e.g. +data.rewards.correctness._target_=grpo_exp.rewards.correctness"))
    for name, node in cfg.data.rewards.items():
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        try:
            get_method(target)
        except Exception:
            problems.append(Problem(f"data.rewards.{name}._target_", f"'{target}' is not an importable function", "name a function such as grpo_exp.rewards.correctness"))
    weights = cfg.trainer.reward_weights
    if weights is not None and len(weights) != len(cfg.data.rewards):
        problems.append(Problem("trainer.reward_weights", f"has {len(weights)} weights for {len(cfg.data.rewards)} reward functions ({', '.join(cfg.data.rewards)})", "give one weight per data.rewards entry, or null"))
    return problems


def check_batch(cfg: DictConfig, world_size: int) -> list[Problem]:
    """TRL's batch rules, checked against the world size this run will have (GRPOConfig only
    checks them inside each process, after launch)."""
    t = cfg.trainer
    if t.num_generations < 2:
        return [Problem("trainer.num_generations", f"is {t.num_generations}; GRPO needs >= 2 completions per prompt to compute advantages", "set trainer.num_generations=2 or more")]
    if t.generation_batch_size is not None and t.steps_per_generation is not None:
        return [Problem("trainer.generation_batch_size", "and trainer.steps_per_generation are both set; TRL derives one from the other", "set only one of them (null the other)")]
    micro = t.per_device_train_batch_size * world_size
    if t.generation_batch_size is not None:
        if t.generation_batch_size % micro:
            return [Problem("trainer.generation_batch_size", f"{t.generation_batch_size} is not a multiple of per_device_train_batch_size x world size = {micro}", f"use a multiple of {micro}")]
        generation_batch = t.generation_batch_size
    else:
        generation_batch = micro * (t.steps_per_generation or t.gradient_accumulation_steps)
    if generation_batch % t.num_generations:
        fits = [g for g in range(2, generation_batch + 1) if generation_batch % g == 0]
        return [Problem(
            "trainer.num_generations",
            f"{t.num_generations} does not divide the generation batch {generation_batch} "
            f"(per_device_train_batch_size {t.per_device_train_batch_size} x world size {world_size} x steps_per_generation "
            f"{t.steps_per_generation or t.gradient_accumulation_steps}); every prompt needs all its completions in one batch",
            f"trainer.num_generations in {fits}, or a per_device_train_batch_size/steps_per_generation that makes the batch a multiple of {t.num_generations}",
        )]
    return []


def check_lora(cfg: DictConfig) -> list[Problem]:
    if not cfg.peft.enabled:
        return []
    known = LINEAR_MODULES.get(cfg.model.model_type, [])
    unknown = [m for m in cfg.peft.target_modules if m not in known]
    if not cfg.peft.target_modules:
        return [Problem("peft.target_modules", "is empty: LoRA would train nothing", f"choose from {known}")]
    if unknown:
        return [Problem("peft.target_modules", f"{unknown} are not layers of a {cfg.model.model_type} model", f"choose from {known}")]
    return []


def check_topology(cfg: DictConfig, plan) -> list[Problem]:
    """Placement rules any machine can check (action=plan runs these too)."""
    topo, v = cfg.topology, cfg.vllm
    problems = []
    if not 0 <= topo.node_rank < topo.nnodes:
        problems.append(Problem("topology.node_rank", f"is {topo.node_rank}, outside 0..{topo.nnodes - 1}", "set topology.node_rank (or NODE_RANK) to this node's index"))
    if v.mode == "server":
        if plan.gpus_per_node == 0:
            problems.append(Problem("vllm.mode", "server mode needs GPUs; this topology has none", "use vllm=off on CPU"))
        elif v.gpus < 1 or v.gpus % v.tensor_parallel_size:
            problems.append(Problem("vllm.gpus", f"is {v.gpus}; the server needs a positive multiple of vllm.tensor_parallel_size={v.tensor_parallel_size}", f"set vllm.gpus={v.tensor_parallel_size}"))
        elif v.gpus >= plan.gpus_per_node:
            problems.append(Problem("vllm.gpus", f"reserves {v.gpus} of node 0's {plan.gpus_per_node} GPUs, leaving none to train", f"set vllm.gpus below {plan.gpus_per_node}, or use vllm=colocate"))
        if cfg.model.name_or_path is None:
            problems.append(Problem("vllm.mode", "the vLLM server loads the model by name; the tiny model has none", "use a real model (model=qwen0.5b) or vllm=off"))
    if v.mode == "colocate" and plan.world_size % v.tensor_parallel_size:
        problems.append(Problem("vllm.tensor_parallel_size", f"{v.tensor_parallel_size} does not divide the world size {plan.world_size}; colocated vLLM groups ranks by it", "use a divisor of the world size"))
    if v.mode != "off" and v.max_model_length is not None and cfg.data.max_prompt_length is not None:
        needed = cfg.data.max_prompt_length + cfg.trainer.max_completion_length
        if v.max_model_length < needed:
            problems.append(Problem("vllm.max_model_length", f"{v.max_model_length} < data.max_prompt_length + trainer.max_completion_length = {needed}", f"set vllm.max_model_length={needed} (or shorten prompts/completions)"))
    return problems


def check_machine(cfg: DictConfig, plan, gpus: int) -> list[Problem]:
    """What this machine can run: action=run starts this node's share here."""
    problems = []
    wanted = cfg.topology.gpus_per_node
    if wanted is not None and wanted > gpus:
        problems.append(Problem("topology.gpus_per_node", f"asks for {wanted} GPUs; this machine has {gpus}", "use topology=local (adapts to this machine), or action=plan to only plan"))
    if cfg.vllm.mode != "off" and gpus == 0:
        problems.append(Problem("vllm.mode", f"'{cfg.vllm.mode}' needs a CUDA GPU (vLLM cannot train on CPU); this machine has none", "use vllm=off here, or action=plan to only plan"))
    return problems


def validate(cfg: DictConfig, plan, gpus: int) -> list[Problem]:
    """Every problem with `cfg` for `plan`, on a machine with `gpus` GPUs (machine checks only
    for action=run: a plan can be made anywhere)."""
    problems = check_required(cfg) + check_unknown_keys(cfg)
    if problems:  # the remaining checks read these values
        return problems
    problems = check_choices(cfg) + check_local_paths(cfg) + check_rewards(cfg) + check_lora(cfg)
    problems += check_topology(cfg, plan)
    if cfg.action == "run":
        problems += check_machine(cfg, plan, gpus)
    if not problems:
        problems += check_batch(cfg, plan.world_size)
    return problems
