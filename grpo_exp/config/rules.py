"""Stage 1 of the checks, on combinations: what TRL's GRPOConfig and GRPOTrainer, and transformers'
TrainingArguments and scheduler factory, refuse inside every worker after launch (trl 1.16, transformers
5.23), refused by the driver first. Each rule returns `Problem`s naming the full key, why and a fix.
Pure Python: no torch/transformers/trl import.
"""

import math

from omegaconf import DictConfig

from grpo_exp import Problem, is_number
from grpo_exp import data as loaders
from grpo_exp.config.model_schema import DTYPES
from grpo_exp.config.trl_schema import DEBUG_OPTIONS, SCHEDULER_KWARGS
from grpo_exp.core import plain


def check_trl_rules(cfg: DictConfig) -> list[Problem]:
    """Combinations GRPOConfig or GRPOTrainer refuse inside every worker (trl 1.16), checked here."""
    return (
        _reference_and_logging_rules(cfg)
        + _evaluation_rules(cfg)
        + _sampling_and_model_rules(cfg)
        + check_transformers_rules(cfg)
    )


def _reference_and_logging_rules(cfg: DictConfig) -> list[Problem]:
    """The reference model's sync, a batch size TRL must not search, where completions are logged."""
    t, problems = cfg.trainer, []
    if t.sync_ref_model and t.beta == 0:
        problems.append(
            Problem(
                "trainer.sync_ref_model",
                "is true while trainer.beta is 0: no reference model is loaded, so there is nothing to sync (TRL "
                "refuses it)",
                "set trainer.beta > 0 (e.g. 0.04), or trainer.sync_ref_model=false",
            )
        )
    if t.sync_ref_model and cfg.peft.enabled:
        problems.append(
            Problem(
                "trainer.sync_ref_model",
                "is not supported with LoRA: the reference model is the frozen base (TRL refuses it)",
                "set trainer.sync_ref_model=false, or peft=none",
            )
        )
    if t.auto_find_batch_size:
        problems.append(
            Problem(
                "trainer.auto_find_batch_size",
                "would break GRPO's prompt groups when it halves the batch (TRL refuses it)",
                "set it false; preflight.on_oom=fit shrinks the batch and keeps the groups",
            )
        )
    if t.log_completions_hub_repo is not None and not t.log_completions:
        problems.append(
            Problem(
                "trainer.log_completions_hub_repo",
                "is set while trainer.log_completions is false",
                "set trainer.log_completions=true, or null the repo",
            )
        )
    return problems


def _evaluation_rules(cfg: DictConfig) -> list[Problem]:
    """Evaluation needs held-out prompts, a split to take them from, and a cadence."""
    t, problems = cfg.trainer, []
    held_out = cfg.data.eval_path is not None or cfg.data.eval_split is not None
    if t.eval_strategy != "no" and not held_out:  # do_eval alone evaluates nothing (Trainer reads eval_strategy)
        problems.append(
            Problem(
                "trainer.eval_strategy",
                f"is '{t.eval_strategy}', but there are no held-out prompts to evaluate on (GRPOTrainer needs an "
                "eval dataset)",
                "set data.eval_path=<file or directory> or data.eval_split=<split of data.path>, or "
                "trainer.eval_strategy=no",
            )
        )
    if cfg.data.eval_split is not None and cfg.data.eval_path is None and not loaders.has_splits(cfg.data):
        problems.append(
            Problem(
                "data.eval_split",
                f"data={loaders.name(cfg.data)} has no splits (its prompts are generated, or the environment's)",
                "use data.eval_path=<file> for held-out prompts",
            )
        )
    if t.eval_strategy == "steps" and t.eval_steps is None and t.logging_steps is None:
        problems.append(Problem("trainer.eval_steps", "is null with eval_strategy=steps", "set trainer.eval_steps"))
    return problems


def _sampling_and_model_rules(cfg: DictConfig) -> list[Problem]:
    """vLLM's importance-sampling clip, the model's dtype and quantization, LoRA on the LM head and on parameters."""
    return _sampling_rules(cfg) + _model_rules(cfg) + _peft_rules(cfg)


def _sampling_rules(cfg: DictConfig) -> list[Problem]:
    v, problems = cfg.vllm, []
    low, high = v.importance_sampling_clip_min, v.importance_sampling_clip_max
    if low is not None and high is not None and low >= high:
        problems.append(
            Problem(
                "vllm.importance_sampling_clip_min",
                f"{low} is not below vllm.importance_sampling_clip_max {high}",
                "make clip_min < clip_max",
            )
        )
    if (
        v.mode != "off"
        and v.importance_sampling_correction
        and v.importance_sampling_mode.endswith("_truncate")
        and low is None
        and high is None
    ):
        problems.append(
            Problem(
                "vllm.importance_sampling_clip_max",
                f"is null, but vllm.importance_sampling_mode={v.importance_sampling_mode} needs a bound",
                "set vllm.importance_sampling_clip_max (TRL's default is 3.0)",
            )
        )
    return problems


def _model_rules(cfg: DictConfig) -> list[Problem]:
    t, problems = cfg.trainer, []
    if "dtype" in (t.model_init_kwargs or {}):
        problems.append(
            Problem(
                "trainer.model_init_kwargs.dtype",
                "is set by model.dtype (the planner sizes weights by it)",
                "use model.dtype=...",
            )
        )
    q = cfg.model.get("quantization")
    if q is not None and not cfg.peft.enabled:
        problems.append(
            Problem(
                "model.quantization",
                f"holds the base weights in {q.bits} bits, which cannot train: only adapters can",
                "use peft=qlora (or peft=lora with a quantized checkpoint)",
            )
        )
    if (
        q is not None
        and not q.prequantized
        and (q.method, q.bits, q.quant_type)
        not in {("bitsandbytes", 8, q.quant_type), ("bitsandbytes", 4, "nf4"), ("bitsandbytes", 4, "fp4")}
    ):
        problems.append(
            Problem(
                "model.quantization",
                f"{q.method} {q.bits}-bit {q.quant_type} is not a load-time quantization grpo_exp "
                "builds (bitsandbytes 4-bit nf4/fp4 or 8-bit)",
                "set model.quantization.bits=4 and quant_type=nf4",
            )
        )
    if q is not None and q.compute_dtype not in DTYPES:
        problems.append(
            Problem(
                "model.quantization.compute_dtype",
                f"'{q.compute_dtype}' is not a valid option",
                f"use one of: {', '.join(DTYPES)}",
            )
        )
    return problems


def _peft_rules(cfg: DictConfig) -> list[Problem]:
    """What TRL and PEFT refuse of the peft group once the model loads."""
    problems = []
    if cfg.peft.enabled and "lm_head" in cfg.peft.target_modules:
        problems.append(
            Problem(
                "peft.target_modules",
                "includes lm_head: TRL computes log-probs from lm_head.weight directly, so an adapter there would "
                "never train (TRL refuses it)",
                "remove lm_head from peft.target_modules",
            )
        )
    if cfg.peft.enabled and cfg.peft.target_parameters and cfg.peft.lora_dropout:
        problems.append(
            Problem(
                "peft.lora_dropout",
                f"is {cfg.peft.lora_dropout}: LoRA on parameters (peft.target_parameters, PEFT's ParamWrapper) does "
                "not work with dropout (PEFT raises 'lora.ParamWrapper does not work with lora_dropout != 0')",
                "set peft.lora_dropout=0",
            )
        )
    return problems


def check_transformers_rules(cfg: DictConfig) -> list[Problem]:
    """TrainingArguments.__post_init__ / _validate_args and the scheduler factory (transformers 5.23):
    what a worker would refuse at start-up, refused here first."""
    return _precision_rules(cfg) + _scheduler_rules(cfg) + _loader_and_saving_rules(cfg)


def _precision_rules(cfg: DictConfig) -> list[Problem]:
    t, problems = cfg.trainer, []
    for name, strategy in (
        ("logging_steps", t.logging_strategy),
        ("eval_steps", t.eval_strategy),
        ("save_steps", t.save_strategy),
    ):
        value = t[name]
        if strategy == "steps" and is_number(value) and math.isfinite(value) and value > 1 and value != int(value):
            problems.append(
                Problem(
                    f"trainer.{name}",
                    f"is {value}: above 1 it counts steps and must be a whole number (below 1: a ratio of the run)",
                    f"set trainer.{name}={math.ceil(value)}",
                )
            )
    if t.fp16 and t.bf16:
        problems.append(
            Problem(
                "trainer.fp16",
                "and trainer.bf16 are both true; mixed precision is one or the other (transformers refuses both)",
                f"set trainer.fp16=false (model.dtype={cfg.model.dtype} turns bf16 on), or trainer.bf16=false",
            )
        )
    if t.fp16_full_eval and t.bf16_full_eval:
        problems.append(
            Problem("trainer.fp16_full_eval", "and trainer.bf16_full_eval are both true", "keep one of them")
        )
    return problems


def _scheduler_rules(cfg: DictConfig) -> list[Problem]:
    t, problems = cfg.trainer, []
    if t.lr_scheduler_type in ("reduce_lr_on_plateau", "greedy") and t.eval_strategy == "no":
        problems.append(
            Problem(
                "trainer.lr_scheduler_type",
                f"'{t.lr_scheduler_type}' steps on an eval metric, and trainer.eval_strategy is no",
                "use another scheduler (cosine, linear, ...)",
            )
        )
    kwargs = (
        plain.mapping(t.lr_scheduler_kwargs, resolve=False) if isinstance(t.lr_scheduler_kwargs, DictConfig) else {}
    )
    accepted = SCHEDULER_KWARGS.get(t.lr_scheduler_type)
    unknown = sorted(set(kwargs) - set(accepted)) if accepted is not None else []
    if unknown:
        problems.append(
            Problem(
                "trainer.lr_scheduler_kwargs",
                f"{unknown} are not arguments of the '{t.lr_scheduler_type}' scheduler",
                f"use {list(accepted or ()) or 'no arguments'}",
            )
        )
    if t.lr_scheduler_type in ("cosine_with_min_lr", "cosine_warmup_with_min_lr") and ("min_lr" in kwargs) == (
        "min_lr_rate" in kwargs
    ):
        problems.append(
            Problem(
                "trainer.lr_scheduler_kwargs",
                f"the '{t.lr_scheduler_type}' scheduler needs exactly one of min_lr and min_lr_rate",
                "set trainer.lr_scheduler_kwargs={min_lr_rate: 0.1}",
            )
        )
    return problems


def _loader_and_saving_rules(cfg: DictConfig) -> list[Problem]:
    t, problems = cfg.trainer, []
    for option in str(t.debug or "").split() if isinstance(t.debug, str) else []:
        if option not in DEBUG_OPTIONS:
            problems.append(
                Problem(
                    "trainer.debug",
                    f"'{option}' is not a debug option",
                    f"use '' or one of: {', '.join(DEBUG_OPTIONS)}",
                )
            )
    if t.dataloader_prefetch_factor is not None and t.dataloader_num_workers == 0:
        problems.append(
            Problem(
                "trainer.dataloader_prefetch_factor",
                "is set while trainer.dataloader_num_workers is 0 (no worker prefetches)",
                "set trainer.dataloader_num_workers > 0, or null the prefetch factor",
            )
        )
    if t.load_best_model_at_end and t.save_strategy != "best" and t.eval_strategy != t.save_strategy:
        problems.append(
            Problem(
                "trainer.load_best_model_at_end",
                f"needs trainer.save_strategy ('{t.save_strategy}') to match trainer.eval_strategy "
                f"('{t.eval_strategy}')",
                "set both strategies alike, or save_strategy=best",
            )
        )
    return problems
