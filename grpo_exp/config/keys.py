"""Names and values from the rest of the GRPO world, and where they live here.

Three tables, one job each:

- `ALIASES`: deprecated names TRL / transformers still accept, and the field each resolves to. A set
  alias is honoured exactly as transformers resolves it (it applies when the new name is not set);
  setting both names to different values is refused naming both.
- `COERCED`: values TRL maps before use (`scale_rewards=false` means `none`), applied the same way.
- `HOMES`: names a user's recipe carries that are not grpo_exp keys - TRL's script dataclasses
  (`ModelConfig`, `ScriptArguments`, `GRPOScriptArguments`), GRPOConfig fields of older TRL
  releases, open-r1's additions - each with the grpo_exp key that does its job, or why there is
  none. Unknown-key messages and the recipe importer (`config/recipe.py`) both read it.

Pure Python: the driver uses it before anything is imported.
"""

import logging
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf, open_dict

from grpo_exp import Problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alias:
    canonical: str  # the full key the alias resolves to
    unset: object = None  # the alias's value when the user did not set it
    note: str = ""  # said (logged, and in an imported experiment) when the alias is used


TRL2_NOTE = "TRL 2.0 removes this name; written under the one TRL 1.16 says replaces it"
ALIASES = {
    # transformers 5: "`gradient_checkpointing*` are deprecated aliases of `activation_checkpointing*`,
    # used only when the new name is not set" (TrainingArguments.__post_init__).
    "trainer.gradient_checkpointing": Alias("trainer.activation_checkpointing"),
    "trainer.gradient_checkpointing_kwargs": Alias("trainer.activation_checkpointing_kwargs"),
    # trl 1.16 GRPOConfig.__post_init__ / GRPOTrainer: the old names set the new ones, and TRL 2.0 removes them, so
    # a recipe written today keeps working after it.
    "trainer.use_transformers_paged": Alias(
        "trainer.use_transformers_continuous_batching", unset=False, note=TRL2_NOTE
    ),
    "vllm.importance_sampling_cap": Alias("vllm.importance_sampling_clip_max", note=TRL2_NOTE),
    # TRL's own replacement ("Use the Hub kernels instead, with model_init_kwargs={'use_kernels': True}"): the
    # hub's kernels, which need the `kernels` package (preflight checks it)
    "trainer.use_liger_kernel": Alias("trainer.model_init_kwargs.use_kernels", unset=False, note=TRL2_NOTE),
}

# key -> {value as the schema holds it: the value TRL turns it into}. A str field holds a YAML
# boolean as "True"/"False"; an untyped (Any) field keeps the bool.
COERCED: dict[str, dict] = {
    "trainer.scale_rewards": {"True": "group", "False": "none", "true": "group", "false": "none"},  # trl GRPOConfig
    "trainer.include_num_input_tokens_seen": {True: "all", False: "no"},  # transformers TrainingArguments
}


def resolve(cfg: DictConfig, explicit: set[str]) -> list[Problem]:
    """Apply ALIASES and COERCED to the composed `cfg` in place, as TRL / transformers would.
    `explicit`: the keys the user set (command line, experiment file); a canonical key set there
    to another value than its alias is a conflict, one at its default is replaced by the alias."""
    problems = []
    for key, choices in COERCED.items():
        value = OmegaConf.select(cfg, key)
        if isinstance(value, (str, bool)) and value in choices:
            OmegaConf.update(cfg, key, choices[value])
    for alias, target in ALIASES.items():
        value = OmegaConf.select(cfg, alias)
        if value is None or value == target.unset:
            continue
        current = OmegaConf.select(cfg, target.canonical)
        if isinstance(current, DictConfig):
            current = OmegaConf.to_container(current)
        plain = OmegaConf.to_container(value) if isinstance(value, DictConfig) else value
        if target.canonical in explicit and current != plain:
            problems.append(
                Problem(
                    alias,
                    f"is {plain!r} while {target.canonical} is {current!r}; it is a deprecated alias of "
                    f"{target.canonical}, so the two say different things",
                    f"set only {target.canonical}",
                )
            )
            continue
        with open_dict(cfg):  # the canonical key may sit inside an untyped mapping (model_init_kwargs)
            OmegaConf.update(cfg, target.canonical, value, merge=False)
        OmegaConf.update(cfg, alias, target.unset, merge=False)
        if target.note:
            log.warning("%s=%r is %s=%r: %s", alias, plain, target.canonical, plain, target.note)
    if cfg.peft.get("target_parameters") and "peft.lora_dropout" not in explicit:
        # PEFT's ParamWrapper (LoRA on parameters) takes no dropout: the option's default gives way, a value the
        # user gave is refused by config/rules.py
        OmegaConf.update(cfg, "peft.lora_dropout", 0.0)
    return problems


@dataclass(frozen=True)
class Home:
    key: str | None  # the grpo_exp key that does the job; None: there is none
    note: str  # how it maps, or why there is no home
    # No home, and none needed: the field never changed a GRPO run (TRL's parser or script ignored it, or
    # it only ever did what grpo_exp does anyway). A recipe's copy is noted, not refused.
    ignored: bool = False


def _home(key: str | None, note: str = "") -> Home:
    return Home(key, note)


def _ignored(note: str) -> Home:
    return Home(None, note, ignored=True)


# accelerate's launch settings, as they sometimes sit inside a recipe: `accelerate launch` reads them from its
# own config file or command line only, and TRL's parser ignored them there (older TRL silently, `trl grpo`
# with fail_with_unknown_args=False).
_ACCELERATE_IN_RECIPE = _ignored(
    "an accelerate launch setting, read by accelerate from its own config or command line and never by TRL's "
    "parser (grpo_exp's topology says how many processes run where)"
)


# open-r1's script arguments that configure one of its rewards, which grpo_exp does not have: what they set is read
# only by that reward, so without it in reward_funcs they change nothing (open-r1's recipes carry them all, at their
# defaults). A recipe that names the reward has that name refused instead (--skip <name> trains without it).
_OPEN_R1_COSINE = _ignored("configures open-r1's cosine reward, which only reads it: a no-op without that reward")
_OPEN_R1_REPETITION = _ignored(
    "configures open-r1's repetition_penalty reward, which only reads it: a no-op without that reward"
)
_OPEN_R1_CODE = _ignored("configures open-r1's code rewards, which only read it: a no-op without them")


# Bare names, as they appear in a TRL / open-r1 recipe YAML (or `trainer.<name>` on our command line).
HOMES = {
    # trl ModelConfig
    "model_name_or_path": _home("model.name_or_path", "with model=auto: the numbers come from its config.json"),
    "model_revision": _home("trainer.model_init_kwargs.revision"),
    "dtype": _home("model.dtype"),
    "torch_dtype": _home("model.dtype", "transformers' old name of dtype"),
    "attn_implementation": _home("trainer.model_init_kwargs.attn_implementation"),
    "trust_remote_code": _home("trainer.trust_remote_code"),
    "use_peft": _home("peft", "peft=lora (true) or peft=none (false)"),
    "lora_r": _home("peft.r"),
    "lora_alpha": _home("peft.lora_alpha"),
    "lora_dropout": _home("peft.lora_dropout"),
    "lora_target_modules": _home("peft.target_modules"),
    "lora_target_parameters": _home("peft.target_parameters", "LoRA on a mixture of experts' fused expert weights"),
    "lora_modules_to_save": _home(
        None, "fully trained extra modules are not planned by grpo_exp (their gradients and Adam states)"
    ),
    "lora_task_type": _home(None, "grpo_exp trains causal LMs: always CAUSAL_LM"),
    "use_rslora": _home(None, "rsLoRA is not exposed by grpo_exp's peft group"),
    "use_dora": _home(None, "DoRA is not exposed by grpo_exp's peft group (and not planned)"),
    "load_in_4bit": _home("peft", "peft=qlora: 4-bit base weights under LoRA adapters"),
    "load_in_8bit": _home("model.quantization.bits", "peft=qlora model.quantization.bits=8"),
    "bnb_4bit_quant_type": _home("model.quantization.quant_type", "with peft=qlora"),
    "use_bnb_nested_quant": _home("model.quantization.double_quant", "with peft=qlora"),
    "bnb_4bit_quant_storage": _home(None, "bitsandbytes' storage dtype stays uint8 (what the planner sizes)"),
    # trl ScriptArguments / GRPOScriptArguments
    "dataset_name": _home("data.path", "a local file or directory (data=hf), or a hub dataset id"),
    "dataset_config": _home("data.subset"),
    "dataset_train_split": _home("data.split"),
    "dataset_test_split": _home("data.eval_split", "held-out prompts for trainer.eval_strategy"),
    "dataset_streaming": _home(None, "grpo_exp reads datasets whole (the driver counts their rows before launch)"),
    "ignore_bias_buffers": _ignored("a DDP workaround TRL's GRPO script never reads (only its DPO script does)"),
    # early open-r1 recipes carried `dataset_configs: [all]`; no script read it (the field is dataset_config)
    "dataset_configs": _ignored("no TRL or open-r1 field of that name (the dataset's config is dataset_config)"),
    "reward_funcs": _home("data.rewards", "one entry per function: data.rewards.<name>._target_=<dotted path>"),
    "reward_model_name_or_path": _home(None, "reward models are not supported by grpo_exp: reward functions only"),
    # open-r1's GRPOScriptArguments and GRPOConfig additions
    "dataset_prompt_column": _home("data.prompt_column"),
    "system_prompt": _home("data.system_prompt"),
    "chat_template": _home("model.chat_template", "given to the tokenizer in place of its own"),
    "benchmarks": _ignored("open-r1's evaluations of pushed checkpoints, run after and outside the training run"),
    "callbacks": _ignored("open-r1's hub-push callbacks: they act on pushed checkpoints, not on training"),
    "hub_model_revision": _home("trainer.hub_revision"),
    "overwrite_hub_revision": _ignored("open-r1's hub branch handling, outside the training run"),
    "push_to_hub_revision": _ignored("open-r1's hub branch handling, outside the training run"),
    "wandb_entity": _home("logger.entity"),
    "wandb_project": _home("logger.project"),
    "wandb_run_group": _home("logger.group"),
    "wandb_log_unique_prompts": _home("trainer.log_unique_prompts"),
    "cosine_min_value_wrong": _OPEN_R1_COSINE,
    "cosine_max_value_wrong": _OPEN_R1_COSINE,
    "cosine_min_value_correct": _OPEN_R1_COSINE,
    "cosine_max_value_correct": _OPEN_R1_COSINE,
    "cosine_max_len": _OPEN_R1_COSINE,
    "repetition_n_grams": _OPEN_R1_REPETITION,
    "repetition_max_penalty": _OPEN_R1_REPETITION,
    "code_language": _OPEN_R1_CODE,
    "code_eval_test_batch_size": _OPEN_R1_CODE,
    "parallel_code_exec_per_proc": _OPEN_R1_CODE,
    "e2b_router_url": _OPEN_R1_CODE,
    "morph_router_url": _OPEN_R1_CODE,
    "code_provider": _OPEN_R1_CODE,
    "ioi_provider": _OPEN_R1_CODE,
    # GRPOConfig fields of older TRL releases
    "max_prompt_length": _home("data.max_prompt_length", "prompts longer than this are dropped before training"),
    "use_vllm": _home("vllm", "vllm=colocate or vllm=server (true), vllm=off (false)"),
    "vllm_mode": _home("vllm", "vllm=colocate or vllm=server"),
    "vllm_device": _home("vllm.gpus", "grpo_exp places the server itself: vllm.gpus GPUs of node 0 (or vllm.nodes=1)"),
    "vllm_gpu_memory_utilization": _home("vllm.gpu_memory_utilization"),
    "vllm_dtype": _home("model.dtype", "vLLM serves the model in model.dtype"),
    "vllm_max_model_len": _home("vllm.max_model_length"),
    "vllm_enable_prefix_caching": _home(None, "TRL 1.x's vLLM engine always enables prefix caching"),
    "vllm_guided_decoding_regex": _home("vllm.structured_outputs_regex"),
    "vllm_server_base_url": _home("vllm.server_host", "with vllm.server_port"),
    "warmup_ratio": _home(
        "trainer.warmup_steps", "transformers 5: a warmup_steps below 1 is a ratio of the training steps"
    ),
    "use_liger_loss": _home("trainer.use_liger_kernel"),
    "ds3_gather_for_generation": _home("trainer.ds3_gather_for_generation"),
    "logging_dir": _ignored("TensorBoard's event dir; grpo_exp logs to the run dir (metrics.jsonl) and its logger"),
    "overwrite_output_dir": _ignored("every grpo_exp run gets a new run dir (resume=<run dir> continues one)"),
    "save_safetensors": _ignored("transformers 5 always saves safetensors"),
    "evaluation_strategy": _home("trainer.eval_strategy", "transformers' old name"),
    "no_cuda": _home(None, "the topology decides CPU or GPU (topology.gpus_per_node=0 trains on CPU)"),
    "sharded_ddp": _home(None, "fairscale sharding, removed from transformers; shard with deepspeed=zero2 or zero3"),
    # accelerate's keys inside a recipe
    **{
        name: _ACCELERATE_IN_RECIPE
        for name in (
            "num_processes",
            "num_machines",
            "mixed_precision",
            "distributed_type",
            "gpu_ids",
            "machine_rank",
            "main_process_ip",
            "main_process_port",
            "deepspeed_config",
            "fsdp_config",
            "compute_environment",
        )
    },
}


def home(key: str) -> Home | None:
    """Where `key` (`trainer.max_prompt_length`, `vllm.device`, `use_vllm`) lives here, if the
    tables know its name; None for a name they do not know."""
    parent, _, name = key.rpartition(".")
    if parent == "vllm" and f"vllm_{name}" in HOMES:
        return HOMES[f"vllm_{name}"]
    return HOMES.get(name) if parent in ("", "trainer", "model", "data") else None


# GRPOConfig fields grpo_exp sets itself, and the key that sets each. They are left out of the
# `trainer` / `vllm` groups (schema_gen skips them), so setting one is an "unknown key" whose
# message names this key instead (errors.explain).
OWNED_TRAINER_FIELDS = {
    "output_dir": "the run dir (hydra.run.dir); checkpoints go to <run dir>/checkpoints",
    "deepspeed": "the deepspeed group (deepspeed=zero3, deepspeed.<key>=...)",
    "use_cpu": "the topology (CPU when no GPU is detected or topology.gpus_per_node=0)",
    "report_to": "logger (logger=<a tracker of grpo_exp/trackers/> | none; logger.also=[...]: several)",
    "run_name": "run_name (top level)",
    "seed": "seed (top level)",
    "ddp_timeout": "topology.collective_timeout_s",
    "local_rank": "the launcher (torchrun starts one process per GPU)",
    "project": "logger.project",
    "hub_token": "the HF_TOKEN environment variable (config.yaml is saved in the run dir; tokens never go in it)",
    "resume_from_checkpoint": "resume=<run dir> (the run continues from its latest checkpoint)",
    "fsdp": "the fsdp group (fsdp=full_shard | full_shard_offload | hybrid_shard)",
    "fsdp_config": "the fsdp group's keys (fsdp.reshard_after_forward, fsdp.cpu_offload, ...)",
    "parallelism_config": "nothing: an accelerate object that cannot be written in YAML (GRPO supports no cp/sp "
    "anyway)",
    "use_vllm": "vllm (vllm=off | colocate | server)",
    "vllm_mode": "vllm.mode (vllm=off | colocate | server)",
    "vllm_server_base_url": "vllm.server_host and vllm.server_port",
}
