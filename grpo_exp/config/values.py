"""The values a key may take: the choices of every word-valued key, the range of every number (a number outside
them is a typo that would size something absurd before anything fails), checked before anything else reads them."""

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_exp import Problem, is_number, trackers
from grpo_exp.config import launcher_options
from grpo_exp.config.bounds import above, at_least, within
from grpo_exp.config.model_schema import DTYPES
from grpo_exp.config.trl_schema import CHOICES as ENUM_CHOICES

VLLM_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
# Keys with a fixed set of values: grpo_exp's own, the str fields TRL checks only at run time (trl 1.16
# grpo_trainer.py: "Unknown loss type", "Invalid value for scale_rewards", ...; tests/config/test_config_checks.py
# keeps them equal to the options each field's help in the installed trl lists), and the enum-typed fields of
# GRPOConfig and those transformers gives argparse choices (generated, trl_schema.CHOICES).
CHOICES: dict[str, Any] = {
    "action": ("run", "plan"),
    "vllm.mode": ("off", "colocate", "server"),
    "model.dtype": DTYPES,
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


_PORT = (lambda v: 1 <= v <= 65535, "in [1, 65535] (a TCP port)")
_PROBABILITY_OPEN_LOW = (lambda v: 0 < v <= 1, "in (0, 1]")
_DIMENSION = at_least(1, 2**24)  # a model width or count: anything larger is a typo, and would be built
_SIZE = at_least(1, 2**24)  # tokens, batch sizes, processes: bounded before anything is sized by them
# Numeric ranges. A value outside one either makes TRL, transformers or torch raise inside every
# worker after launch (batch 0, temperature <= 0, a negative learning rate), hangs or exhausts the
# driver (a node plan for 10^30 nodes) or trains something meaningless; tests/config/test_config_checks.py checks
# the trainer rows against GRPOConfig and torch. Every other number must be finite and below 2^53.
RANGES = {
    "trainer.per_device_train_batch_size": _SIZE,
    "trainer.per_device_eval_batch_size": _SIZE,
    "trainer.gradient_accumulation_steps": _SIZE,
    "trainer.num_generations": at_least(2, 2**16),  # advantages compare >= 2 completions of one prompt
    "trainer.num_generations_eval": at_least(2, 2**16),
    "trainer.max_completion_length": _SIZE,
    "trainer.generation_batch_size": at_least(1, 2**30),
    "trainer.steps_per_generation": _SIZE,
    "trainer.num_iterations": _SIZE,
    "trainer.learning_rate": at_least(0),
    "trainer.temperature": above(0),
    "trainer.top_p": _PROBABILITY_OPEN_LOW,
    "trainer.top_k": at_least(0),
    "trainer.min_p": within(0, 1),
    "trainer.repetition_penalty": above(0),
    "trainer.beta": at_least(0),
    "trainer.epsilon": at_least(0),
    "trainer.epsilon_high": at_least(0),
    "trainer.delta": above(0),
    "trainer.max_grad_norm": at_least(0),
    "trainer.weight_decay": at_least(0),
    "trainer.warmup_steps": at_least(0),
    "trainer.adam_beta1": within(0, 1, high_open=True),
    "trainer.adam_beta2": within(0, 1, high_open=True),
    "trainer.adam_epsilon": at_least(0),
    "trainer.label_smoothing_factor": within(0, 1),
    "trainer.num_train_epochs": above(0),
    "trainer.max_steps": (lambda v: v == -1 or 1 <= v <= 2**53, "-1 (train num_train_epochs) or >= 1"),
    "trainer.logging_steps": above(0),
    "trainer.save_steps": above(0),
    "trainer.eval_steps": above(0),
    "trainer.save_total_limit": at_least(1),
    "trainer.torch_empty_cache_steps": at_least(1),  # transformers: "must be an integer bigger than 0"
    "trainer.dataloader_num_workers": at_least(0, 1024),
    "trainer.top_entropy_quantile": within(0, 1),
    "trainer.ref_model_mixup_alpha": within(0, 1),
    "trainer.ref_model_sync_steps": at_least(1),
    "trainer.num_completions_to_print": at_least(0),
    "vllm.gpu_memory_utilization": _PROBABILITY_OPEN_LOW,
    "vllm.tensor_parallel_size": at_least(1, 1024),
    "vllm.gpus": at_least(0, 1024),
    "vllm.nodes": at_least(0, 4096),
    "vllm.max_model_length": _SIZE,
    "vllm.max_num_seqs": _SIZE,
    "vllm.max_num_batched_tokens": _SIZE,
    "vllm.kv_cache_memory_bytes": at_least(1, 2**50),
    "vllm.server_timeout": above(0),
    "vllm.importance_sampling_clip_max": above(0),
    "vllm.importance_sampling_clip_min": at_least(0),
    "data.max_prompt_length": _SIZE,
    "data.num_samples": at_least(1, 2**40),
    "model.hidden_size": _DIMENSION,
    "model.intermediate_size": _DIMENSION,
    "model.num_hidden_layers": at_least(1, 2**16),
    "model.num_attention_heads": at_least(1, 2**16),
    "model.num_key_value_heads": at_least(1, 2**16),
    "model.head_dim": at_least(1, 2**16),
    "model.vocab_size": _DIMENSION,
    "model.max_position_embeddings": at_least(1, 2**30),
    "model.num_parameters": at_least(1, 10**14),
    "topology.nnodes": at_least(1, 4096),
    "topology.gpus_per_node": at_least(0, 1024),
    "topology.gpu_memory_gib": (lambda v: 0 < v <= 2**20, "in (0, 1048576]"),
    "topology.cpu_procs": at_least(1, 1024),
    "topology.node_rank": at_least(0, 4095),
    "topology.master_port": _PORT,
    "topology.rendezvous_timeout_s": above(0),
    "topology.host_memory_gib": (lambda v: 0 < v <= 2**24, "in (0, 16777216]"),
    "topology.collective_timeout_s": above(0),
    "peft.r": at_least(1, 2**16),
    "peft.lora_alpha": above(0),
    "peft.lora_dropout": within(0, 1, high_open=True),
    "memory.limit_gib": above(0),
    "watchdog.stall_s": above(0),
    "watchdog.heartbeat_s": above(0),
    "preemption.grace_s": at_least(0),
}


def _flat_numbers(node, prefix: str = ""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _flat_numbers(value, f"{prefix}{key}.")
        elif is_number(value):
            yield f"{prefix}{key}", value


def check_choices(cfg: DictConfig) -> list[Problem]:
    problems = []
    for key, allowed in {**CHOICES, **launcher_options.choices()}.items():
        options: tuple = allowed() if callable(allowed) else allowed  # a component list: read when checked
        value = OmegaConf.select(cfg, key)
        if value is not None and value not in options:
            problems.append(
                Problem(key, f"'{value}' is not a valid option", f"use one of: {', '.join(map(str, options))}")
            )
    return problems


def check_ranges(cfg: DictConfig) -> list[Problem]:
    problems = []
    ranges = {**RANGES, **launcher_options.ranges()}
    # every number of the config by its full key, in one walk (a select per key costs more than the walk)
    numbers = dict(_flat_numbers(OmegaConf.to_container(cfg, resolve=True)))
    for key, (ok, wanted) in ranges.items():
        value = numbers.get(key)  # absent: null (unset) or not a number, which is the schema's job
        if value is not None and (not math.isfinite(value) or not ok(value)):
            problems.append(Problem(key, f"is {value:.6g}; it must be {wanted}", f"set {key} to a value {wanted}"))
    for key, value in numbers.items():
        if key not in ranges and not key.startswith("hydra.") and (not math.isfinite(value) or abs(value) > 2**53):
            problems.append(
                Problem(
                    key, f"is {value:.6g}; numbers must be finite and at most 2^53", f"set {key} to a realistic value"
                )
            )
    return problems


# Metrics TRL logs under a plain name (final_metrics of summary.json), beside the keys with a "/"
