"""The one place where the config becomes TRL / PEFT / DeepSpeed objects.

Config keys map 1:1 onto library fields: `trainer.*` are GRPOConfig fields verbatim, `vllm.*` are
GRPOConfig's `vllm_*` fields without the prefix, `peft.*` are LoraConfig fields, `deepspeed` is
DeepSpeed's JSON. What is not a plain copy is derived here, with the reason next to it.
"""

import dataclasses
import functools
import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import trackers
from grpo_exp.config import env
from grpo_exp.config.rewards import active_rewards
from grpo_exp.config.schema import VllmConfig
from grpo_exp.config.trl_schema import VllmFields
from grpo_exp.core import plain, rundir
from grpo_exp.data.columns_and_rows import row_problems
from grpo_exp.planning.placement import SERVER_HOST_ENV, weight_sync
from grpo_exp.trackers.common import run_name
from grpo_exp.training.data import build_dataset, build_eval_dataset
from grpo_exp.training.fsdp import fsdp_fields
from grpo_exp.training.measured_trainer import MeasuredGRPOTrainer
from grpo_exp.training.tiny import tiny_model_dir
from grpo_exp.training.weight_sync import generation_class as files_synced_generation

log = logging.getLogger(__name__)

# vllm/ keys that are grpo_exp's own (mode, gpus, ...) rather than GRPOConfig's vllm_* fields.
VLLM_OWN_KEYS = {f.name for f in dataclasses.fields(VllmConfig)} - {f.name for f in dataclasses.fields(VllmFields)}


def model_path(cfg: DictConfig) -> str:
    """Hub id or local directory of the model; the tiny model is built locally on first use (warm-started
    on tool calls when the run has tools: tiny.py says why)."""
    if cfg.model.name_or_path is not None:
        return cfg.model.name_or_path

    return str(tiny_model_dir(cfg.model, env.tool_sets(cfg)))


def deepspeed_dict(cfg: DictConfig) -> dict | None:
    """DeepSpeed's config dict as DeepSpeed defines it; None when the group is `none`."""
    return plain.mapping(cfg.deepspeed) or None


def vllm_fields(cfg: DictConfig) -> dict:
    """GRPOConfig's vllm fields: every key gets its `vllm_` prefix back; mode `off` is use_vllm=False."""
    if cfg.vllm.mode == "off":
        return {"use_vllm": False}
    fields = {f"vllm_{k}": v for k, v in plain.mapping(cfg.vllm, resolve=False).items() if k not in VLLM_OWN_KEYS}
    if fields["vllm_server_host"] is None:  # a serving node the SLURM job found (placement.SERVER_HOST_ENV), else the
        # plan puts the server on node 0, torchrun's MASTER_ADDR
        fields["vllm_server_host"] = os.environ.get(SERVER_HOST_ENV) or os.environ.get("MASTER_ADDR", "127.0.0.1")
    return {"use_vllm": True, "vllm_mode": cfg.vllm.mode, **fields}


def weight_sync_dir(cfg: DictConfig, run_dir: Path) -> Path:
    """Where vllm.weight_sync=filesystem writes the weights: vllm.weight_sync_dir, else <run dir>/weight_sync."""
    return Path(cfg.vllm.weight_sync_dir) if cfg.vllm.weight_sync_dir else run_dir / rundir.WEIGHT_SYNC


def generation_class(cfg: DictConfig, run_dir: Path, use_cpu: bool):
    """The VLLMGeneration GRPOTrainer builds: weight_sync.py's where TRL's weight push cannot run (a server synced
    through files; a colocated engine on CPU), else None (TRL's own)."""

    if cfg.vllm.mode == "server" and weight_sync(cfg.vllm, "cpu" if use_cpu else "cuda") == "filesystem":
        sync_dir = weight_sync_dir(cfg, run_dir)
    elif cfg.vllm.mode == "colocate" and use_cpu:
        sync_dir = None
    else:
        return None

    return files_synced_generation(sync_dir)


# Fields transformers 5.18 renamed; older releases (vLLM's CPU build pins < 5.18) know the old names only.
RENAMED_IN_TRANSFORMERS_5_18 = {
    "activation_checkpointing": "gradient_checkpointing",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs",
}


def for_installed_transformers(trainer: dict, config_class) -> dict:
    """`trainer` under the names the installed GRPOConfig takes: the schema follows the newest transformers."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    for new, old in RENAMED_IN_TRANSFORMERS_5_18.items():
        if new not in fields and new in trainer:
            value = trainer.pop(new)
            if value is not None:  # null: the old name's own default stands
                trainer[old] = value
    return trainer


def grpo_config(cfg: DictConfig, run_dir: Path, use_cpu: bool):
    """GRPOConfig for this run. `use_cpu` must be true on CPU: without it torchrun trains N
    independent single-process copies instead of one DDP run."""
    from trl import GRPOConfig

    trainer = for_installed_transformers(plain.mapping(cfg.trainer), GRPOConfig)
    # model.dtype owns the dtype (the planner sizes weights by it); other load options pass through
    model_init_kwargs = {**(trainer.pop("model_init_kwargs") or {}), "dtype": cfg.model.dtype}
    if cfg.model.num_experts:  # the experts backend the planner planned (transformers' default: grouped_mm)
        model_init_kwargs["experts_implementation"] = cfg.model.experts_implementation
    return GRPOConfig(
        **trainer,
        **vllm_fields(cfg),
        model_init_kwargs=model_init_kwargs,
        deepspeed=deepspeed_dict(cfg),
        **fsdp_fields(cfg),
        output_dir=str(run_dir / rundir.CHECKPOINTS),
        run_name=run_name(cfg, run_dir),  # what every tracker calls the run (W&B's too)
        project=cfg.logger.project,  # trackio's project (W&B's comes with its run, trackers/wandb.py)
        seed=cfg.seed,
        use_cpu=use_cpu,
        ddp_timeout=cfg.topology.collective_timeout_s,
        report_to=trackers.configured(cfg) or "none",
    )


def lora_config(cfg: DictConfig):
    """peft.LoraConfig from the `peft` group, or None for full fine-tuning."""
    if not cfg.peft.enabled:
        return None
    from peft import LoraConfig

    fields = {k: v for k, v in plain.mapping(cfg.peft, resolve=False).items() if k != "enabled"}
    return LoraConfig(task_type="CAUSAL_LM", **fields)


def quantization_config(cfg: DictConfig):
    """transformers' BitsAndBytesConfig for model.quantization (peft=qlora), or None: no quantization,
    or a checkpoint stored quantized (from_pretrained reads its own quantization_config)."""
    q = cfg.model.get("quantization")
    if q is None or q.prequantized:
        return None
    import torch
    from transformers import BitsAndBytesConfig

    compute = getattr(torch, cfg.model.dtype if q.compute_dtype == "auto" else q.compute_dtype)
    if q.bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=q.quant_type,
        bnb_4bit_use_double_quant=q.double_quant,
        bnb_4bit_compute_dtype=compute,
    )


def reward_funcs(cfg: DictConfig) -> list:
    """The functions named by `data.rewards.<name>._target_`; other keys in the entry become
    keyword arguments (a functools.partial, which TRL still names after the function)."""
    from hydra.utils import get_method, instantiate

    funcs = []
    for name, node in active_rewards(cfg.data).items():
        has_kwargs = any(k != "_target_" for k in node)
        funcs.append(instantiate(node, _partial_=True) if has_kwargs else get_method(node._target_))
        log.info("reward %s <- %s", name, node._target_)
    return funcs


def tools(cfg: DictConfig) -> list:
    """env.tools: the functions, by dotted path (TRL names each after its __name__)."""
    from hydra.utils import get_method

    return [get_method(path) for path in cfg.env.tools]


def environment_factory(cfg: DictConfig):
    """TRL's environment_factory: env.factory as one callable, env.factories as {name: callable} (each row's
    `environment` column picks one), or None. Each call builds a fresh instance with the node's other keys as
    keyword arguments; TRL pools the instances and resets them per episode."""
    from hydra.utils import instantiate

    def factory(node):
        return functools.partial(instantiate, node)

    if cfg.env.factory is not None:
        return factory(cfg.env.factory)
    return {name: factory(node) for name, node in cfg.env.factories.items()} or None


def tokenizer(cfg: DictConfig, path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if cfg.model.get("chat_template"):  # open-r1's inline template for a base model: what every prompt is rendered by
        tok.chat_template = cfg.model.chat_template
    if tok.pad_token is None:  # Llama ships without one; GRPO pads prompt batches
        tok.pad_token = tok.eos_token
    return tok


def trainer(cfg: DictConfig, run_dir: Path, use_cpu: bool, callbacks: list, phases=None):
    """A ready GRPOTrainer for the frozen config: measured_trainer's, which measures every phase of a step
    into `phases` (memory.telemetry; None: not measured) and says when TRL drops a tool's result."""

    path = model_path(cfg)
    tok = tokenizer(cfg, path)
    args = grpo_config(cfg, run_dir, use_cpu)
    dataset = build_dataset(cfg.data, tok, cfg.seed)  # None: data=none, TRL builds rows for reset() to fill
    too_few = dataset is not None and row_problems(
        cfg.data,
        len(dataset),
        "the dataset after loading and filtering",
        args.generation_batch_size // args.num_generations,
    )
    if too_few:  # hub data and data.max_prompt_length are only known here, not in the driver's preflight
        raise ValueError(str(too_few[0]))
    log.info("model %s (%s) from %s", cfg.model.name, cfg.model.dtype, path)
    trainer = MeasuredGRPOTrainer(
        phases=phases,
        model=path,
        reward_funcs=reward_funcs(cfg),
        args=args,
        train_dataset=dataset,
        eval_dataset=build_eval_dataset(cfg.data, tok, cfg.seed),
        processing_class=tok,
        peft_config=lora_config(cfg),
        quantization_config=quantization_config(cfg),
        tools=tools(cfg) or None,
        environment_factory=environment_factory(cfg),
        generation_class=generation_class(cfg, run_dir, use_cpu),
        callbacks=callbacks,
    )
    if use_cpu and cfg.model.get("quantization") is not None:
        _keep_4bit_training_layout(trainer.model)
    return trainer


def _keep_4bit_training_layout(model) -> None:
    """bitsandbytes 0.50 on CPUs with AVX512-BF16: a forward without gradients in eval mode (GRPO's
    evaluation) repacks each 4-bit weight into an inference layout that the next training forward
    cannot use ("a view of a leaf Variable ... in-place operation"). Keep the training layout."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
