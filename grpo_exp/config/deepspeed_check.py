"""The `deepspeed` group checked by DeepSpeed's own config models before launch.

DeepSpeed validates `zero_optimization` (with its offload blocks), `bf16` and `fp16` with pydantic
models that forbid unknown keys; it does so inside every worker, after launch. Here the same
models run in the driver. "auto" values are left out first: the HF integration replaces them from
the trainer config before DeepSpeed sees them. Other top-level keys DeepSpeed reads with
dict.get(), so a misspelt one is silently ignored; one that is a near-miss of a key DeepSpeed
knows (`zero_optimisation`) is reported.

Importing deepspeed imports torch (~3 s on 2 cores, most of a 512-node plan), so the models run only
on sections that differ from every shipped option (conf/deepspeed/*.yaml): those are checked against
DeepSpeed's models by tests/config/test_deepspeed_check.py, and `deepspeed=zero3` plans without importing deepspeed.
"""

import contextlib
import difflib
import functools
import os

from grpo_exp import CONF_DIR, Problem
from grpo_exp.core import plain

# Top-level sections DeepSpeed reads (deepspeed/runtime/config.py); used only to catch near-misses.
KNOWN_TOP_LEVEL = (
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "optimizer",
    "scheduler",
    "fp16",
    "bf16",
    "amp",
    "torch_autocast",
    "gradient_clipping",
    "prescale_gradients",
    "gradient_predivide_factor",
    "communication_data_type",
    "zero_optimization",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
    "activation_checkpointing",
    "flops_profiler",
    "wall_clock_breakdown",
    "memory_breakdown",
    "steps_per_print",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "comet",
    "comms_logger",
    "checkpoint",
    "data_types",
    "aio",
    "elasticity",
    "autotuning",
    "compression_training",
    "data_efficiency",
    "curriculum_learning",
    "pipeline",
    "sparse_attention",
    "hybrid_engine",
    "tensor_parallel",
    "compile",
    "timers",
    "dump_state",
    "dataloader_drop_last",
    "seq_parallel_communication_data_type",
    "gradient_allreduce_op",
    "nebula",
)


# Values DeepSpeed reads by hand (deepspeed/runtime/config.py: dict.get, then .lower() / .upper() or
# indexing), which no pydantic model types: a number there passes DeepSpeed's models and then fails inside
# every worker ("'int' object has no attribute 'lower'"). "a.b" is section a's key b.
HAND_READ_STRINGS = (
    "optimizer.type",
    "scheduler.type",
    "communication_data_type",
    "seq_parallel_communication_data_type",
    "checkpoint.tag_validation",
    "data_types.grad_accum_dtype",
)
HAND_READ_MAPPINGS = ("optimizer", "scheduler", "optimizer.params", "scheduler.params", "checkpoint", "data_types")


def hand_read_problems(ds: dict) -> list[Problem]:
    """The hand-read values of `ds` with the wrong type: strings that are not strings, sections that are
    not mappings. A section that is not a mapping hides its keys, so they are not looked at."""
    problems = []
    for path in HAND_READ_MAPPINGS + HAND_READ_STRINGS:
        *parents, leaf = path.split(".")
        node: object = ds
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node or node[leaf] is None:
            continue
        wanted, kind = (str, "a string") if path in HAND_READ_STRINGS else (dict, "a mapping")
        if not isinstance(node[leaf], wanted):
            problems.append(
                Problem(
                    f"deepspeed.{path}",
                    f"is {node[leaf]!r}; DeepSpeed reads it as {kind} (and fails inside every worker otherwise)",
                    f"give deepspeed.{path} {kind}" + (", e.g. AdamW" if path == "optimizer.type" else ""),
                )
            )
    return problems


def name_problems(ds: dict) -> list[Problem]:
    """optimizer.type and scheduler.type name what DeepSpeed builds: one of its own optimizers (any case) or
    a torch.optim class, one of its lr_schedules or a torch.optim.lr_scheduler class, as the engine
    resolves them (deepspeed/runtime/engine.py: _configure_basic_optimizer, _scheduler_from_config).
    Imports deepspeed and torch, so only when such a section is there."""
    sections = [s for s in ("optimizer", "scheduler") if isinstance(ds.get(s), dict)]
    untyped = [
        Problem(
            f"deepspeed.{s}.type",
            f"is missing: transformers leaves the {s} to DeepSpeed once deepspeed.{s} is there, and DeepSpeed "
            "builds none without a type",
            f"set deepspeed.{s}.type, or remove deepspeed.{s}",
        )
        for s in sections
        if ds[s].get("type") is None
    ]
    named = {s: ds[s]["type"] for s in sections if isinstance(ds[s].get("type"), str)}  # others: hand_read_problems
    if not named:
        return untyped
    import torch

    with _cpu_accelerator():
        from deepspeed.runtime import lr_schedules
        from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    known = {
        "optimizer": (lambda n: n.lower() in DEEPSPEED_OPTIMIZERS or hasattr(torch.optim, n), DEEPSPEED_OPTIMIZERS),
        "scheduler": (
            lambda n: hasattr(lr_schedules, n) or hasattr(torch.optim.lr_scheduler, n),
            lr_schedules.VALID_LR_SCHEDULES,
        ),
    }
    return untyped + [
        Problem(
            f"deepspeed.{section}.type",
            f"'{name}' is not {'an' if section == 'optimizer' else 'a'} {section} DeepSpeed builds (its own, or a "
            f"torch.optim{'.lr_scheduler' * (section == 'scheduler')} class by name)",
            f"use one of {list(known[section][1])} or a torch.optim{'.lr_scheduler' * (section == 'scheduler')} class",
        )
        for section, name in named.items()
        if not known[section][0](name)
    ]


def _without_auto(value):
    if isinstance(value, dict):
        return {k: _without_auto(v) for k, v in value.items() if v != "auto"}
    return value


def _model_problems(section: str, model, values) -> list[Problem]:
    import pydantic

    if not isinstance(values, dict):
        return [
            Problem(
                f"deepspeed.{section}",
                f"is {values!r}; DeepSpeed expects a mapping",
                f"write deepspeed.{section}.<key>=<value>",
            )
        ]
    try:
        model(**_without_auto(values))
    except pydantic.ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(map(str, (f"deepspeed.{section}", *error["loc"])))
            if error["type"] == "extra_forbidden":
                leaf = str(error["loc"][-1])
                close = difflib.get_close_matches(leaf, list(model.model_fields), n=3, cutoff=0.6)
                fix = (
                    f"did you mean {' or '.join(close)}?"
                    if close
                    else f"see DeepSpeed's {model.__name__} for the valid keys"
                )
                problems.append(Problem(key, f"DeepSpeed does not know this key ({model.__name__})", fix))
            else:
                problems.append(
                    Problem(
                        key,
                        f"{error['msg']} (DeepSpeed {model.__name__})",
                        "give a value of the type DeepSpeed expects",
                    )
                )
        return problems
    return []


@contextlib.contextmanager
def _cpu_accelerator():
    """deepspeed picks an accelerator when imported, and on a machine without a GPU it warns that it fell
    back to the CPU. The driver only reads config models and names: one is named for the import alone,
    so the console stays clean and no worker inherits the choice."""
    preset = os.environ.get("DS_ACCELERATOR")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        yield
    finally:
        if preset is None:
            os.environ.pop("DS_ACCELERATOR", None)


MODEL_SECTIONS = ("zero_optimization", "bf16", "fp16")  # the sections DeepSpeed checks with pydantic models


@functools.cache
def shipped_sections() -> tuple[dict, ...]:
    """The model-checked sections of each shipped deepspeed option, as composing it gives them."""
    options = (_option(p.stem) for p in sorted((CONF_DIR / "deepspeed").glob("*.yaml")))
    return tuple({s: o[s] for s in MODEL_SECTIONS if s in o} for o in options)


def _option(name: str) -> dict:
    """conf/deepspeed/<name>.yaml with its defaults list applied (the options extend each other:
    zero3_offload is zero3 plus offload blocks), without Hydra: the driver is inside Hydra's app."""
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.load(CONF_DIR / "deepspeed" / f"{name}.yaml")
    assert isinstance(node, DictConfig), f"conf/deepspeed/{name}.yaml is a mapping"
    defaults = list(node.pop("defaults", None) or ["_self_"])
    parts = [node if entry == "_self_" else OmegaConf.create(_option(entry)) for entry in defaults]
    return plain.mapping(OmegaConf.merge(*parts), resolve=False)


def problems(ds: dict) -> list[Problem]:
    sections = {s: ds[s] for s in MODEL_SECTIONS if s in ds}
    out = [] if sections in shipped_sections() else model_problems(sections)
    out += hand_read_problems(ds) + name_problems(ds)
    for key in ds:
        if key in KNOWN_TOP_LEVEL:
            continue
        close = difflib.get_close_matches(key, KNOWN_TOP_LEVEL, n=1, cutoff=0.8)
        if close:
            out.append(
                Problem(
                    f"deepspeed.{key}",
                    "DeepSpeed would silently ignore this key",
                    f"did you mean deepspeed.{close[0]}?",
                )
            )
    return out


def model_problems(sections: dict) -> list[Problem]:
    """`sections` (zero_optimization, bf16, fp16) through DeepSpeed's own pydantic models."""
    with _cpu_accelerator():
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    models = {"zero_optimization": DeepSpeedZeroConfig, "bf16": DeepSpeedBF16Config, "fp16": DeepSpeedFP16Config}
    return [p for section, values in sections.items() for p in _model_problems(section, models[section], values)]


# DeepSpeed keys transformers' integration fills from (and compares with) the trainer config
# (HfTrainerDeepSpeedConfig.trainer_config_process: a value other than "auto" must match, or every
# worker stops with "Please correct the following DeepSpeed config values that mismatch").
MATCHED = {
    "train_micro_batch_size_per_gpu": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "max_grad_norm",
}


def against_trainer(ds: dict, trainer) -> list[Problem]:
    """The deepspeed group's top-level values against the trainer's (`trainer` = cfg.trainer)."""
    out = []
    if "train_micro_batch_size_per_gpu" not in ds and "train_batch_size" not in ds:
        return [
            Problem(
                "deepspeed",
                f"holds only {sorted(ds)}: DeepSpeed needs a batch size (train_micro_batch_size_per_gpu), which the "
                "shipped options leave to transformers as auto",
                "choose an option (deepspeed=zero2, ...) and override its keys",
            )
        ]
    for key, field in MATCHED.items():
        value = ds.get(key, "auto")
        if value != "auto" and value != trainer[field]:
            out.append(
                Problem(
                    f"deepspeed.{key}",
                    f"is {value!r} but trainer.{field} is {trainer[field]}; transformers fills it from the "
                    "trainer and refuses a different value",
                    f"set deepspeed.{key}=auto (or trainer.{field}={value!r})",
                )
            )
    total = ds.get("train_batch_size", "auto")
    if total != "auto" and not (isinstance(total, int) and not isinstance(total, bool) and total >= 1):
        out.append(
            Problem(
                "deepspeed.train_batch_size",
                f"is {total!r}; it must be auto or a whole number of sequences",
                "set deepspeed.train_batch_size=auto (per_device x world size x gradient_accumulation_steps)",
            )
        )
    enabled = {
        p: (ds.get(p) or {}).get("enabled", "auto") if isinstance(ds.get(p), dict) else "auto" for p in ("fp16", "bf16")
    }
    if enabled["fp16"] is True and enabled["bf16"] is True:
        out.append(
            Problem(
                "deepspeed.fp16.enabled",
                "and deepspeed.bf16.enabled are both true (DeepSpeed refuses both)",
                "set one of them to false, or both to auto (they follow trainer.bf16 / trainer.fp16)",
            )
        )
    for precision in ("fp16", "bf16"):
        wanted = bool(trainer[precision] or trainer[f"{precision}_full_eval"])
        if enabled[precision] not in ("auto", wanted) and isinstance(enabled[precision], bool):
            out.append(
                Problem(
                    f"deepspeed.{precision}.enabled",
                    f"is {enabled[precision]} but trainer.{precision} is {trainer[precision]}; "
                    "transformers refuses the mismatch",
                    f"set deepspeed.{precision}.enabled=auto",
                )
            )
    return out
