"""The `deepspeed` group checked by DeepSpeed's own config models before launch.

DeepSpeed validates `zero_optimization` (with its offload blocks), `bf16` and `fp16` with pydantic
models that forbid unknown keys; it does so inside every worker, after launch. Here the same
models run in the driver. "auto" values are left out first: the HF integration replaces them from
the trainer config before DeepSpeed sees them. Other top-level keys DeepSpeed reads with
dict.get(), so a misspelt one is silently ignored; one that is a near-miss of a key DeepSpeed
knows (`zero_optimisation`) is reported.

Imports deepspeed (which imports torch, ~2 s): validate.py calls this only when the group is used.
"""

import difflib
import os

from grpo_exp.config.errors import Problem

# Top-level sections DeepSpeed reads (deepspeed/runtime/config.py); used only to catch near-misses.
KNOWN_TOP_LEVEL = (
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer", "scheduler",
    "fp16", "bf16", "amp", "torch_autocast", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
    "communication_data_type", "zero_optimization", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    "activation_checkpointing", "flops_profiler", "wall_clock_breakdown", "memory_breakdown", "steps_per_print",
    "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "checkpoint", "data_types", "aio",
    "elasticity", "autotuning", "compression_training", "data_efficiency", "curriculum_learning", "pipeline",
    "sparse_attention", "hybrid_engine", "tensor_parallel", "compile", "timers", "dump_state",
    "dataloader_drop_last", "seq_parallel_communication_data_type", "gradient_allreduce_op", "nebula",
)


def _without_auto(value):
    if isinstance(value, dict):
        return {k: _without_auto(v) for k, v in value.items() if v != "auto"}
    return value


def _model_problems(section: str, model, values) -> list[Problem]:
    import pydantic

    if not isinstance(values, dict):
        return [Problem(f"deepspeed.{section}", f"is {values!r}; DeepSpeed expects a mapping", f"write deepspeed.{section}.<key>=<value>")]
    try:
        model(**_without_auto(values))
    except pydantic.ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(map(str, (f"deepspeed.{section}", *error["loc"])))
            if error["type"] == "extra_forbidden":
                leaf = str(error["loc"][-1])
                close = difflib.get_close_matches(leaf, list(model.model_fields), n=3, cutoff=0.6)
                fix = f"did you mean {' or '.join(close)}?" if close else f"see DeepSpeed's {model.__name__} for the valid keys"
                problems.append(Problem(key, f"DeepSpeed does not know this key ({model.__name__})", fix))
            else:
                problems.append(Problem(key, f"{error['msg']} (DeepSpeed {model.__name__})", "give a value of the type DeepSpeed expects"))
        return problems
    return []


def problems(ds: dict) -> list[Problem]:
    # deepspeed picks an accelerator when imported, and on a machine without a GPU it warns that it
    # fell back to the CPU. The driver only reads config models: name one for the import alone, so
    # the console stays clean and no worker inherits the choice.
    preset = os.environ.get("DS_ACCELERATOR")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    finally:
        if preset is None:
            os.environ.pop("DS_ACCELERATOR", None)

    out = []
    for section, model in (("zero_optimization", DeepSpeedZeroConfig), ("bf16", DeepSpeedBF16Config), ("fp16", DeepSpeedFP16Config)):
        if section in ds:
            out += _model_problems(section, model, ds[section])
    for key in ds:
        if key in KNOWN_TOP_LEVEL:
            continue
        close = difflib.get_close_matches(key, KNOWN_TOP_LEVEL, n=1, cutoff=0.8)
        if close:
            out.append(Problem(f"deepspeed.{key}", "DeepSpeed would silently ignore this key", f"did you mean deepspeed.{close[0]}?"))
    return out
