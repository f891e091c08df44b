"""A recipe's fields that depend on others or on the launch (use_vllm, use_peft, the number of trainers, the model's
dtype, whether it evaluates): gathered while the fields are read (fields.py), resolved once all of them and the
accelerate config are known."""

import re

from grpo_exp.recipe.experiment import Experiment, is_text
from grpo_exp.recipe.launch import accelerate_fsdp

QUANTIZATION_FIELDS = {
    "load_in_4bit": "bits",
    "load_in_8bit": "bits",
    "bnb_4bit_quant_type": "quant_type",
    "use_bnb_nested_quant": "double_quant",
}


# Fields read once the whole recipe and its launch are known (use_vllm, use_peft, the number of trainers, the
# model's dtype, whether it evaluates): each is resolved by the function of its name in resolve_later().
LATER = {
    "vllm_device",
    "vllm_dtype",
    "dataset_test_split",
    "load_in_4bit",
    "load_in_8bit",
    "bnb_4bit_quant_type",
    "use_bnb_nested_quant",
    "fsdp",
    "fsdp_config",
}


def resolve_later(exp: Experiment, trainers: int | None) -> None:
    if "vllm_device" in exp.later:
        _vllm_device(exp, exp.later["vllm_device"], trainers)
    if "vllm_dtype" in exp.later:
        _vllm_dtype(exp, exp.later["vllm_dtype"])
    _evaluation(exp, exp.later.get("dataset_test_split"))
    _quantization(exp, {k: v for k, v in exp.later.items() if k in QUANTIZATION_FIELDS})
    if exp.later.get("fsdp") not in (None, False, "", []):
        _trainer_fsdp(exp, exp.later["fsdp"], exp.later.get("fsdp_config"))
    elif exp.later.get("fsdp_config"):
        exp.ignore("fsdp_config", exp.later["fsdp_config"], "fsdp is off: transformers reads fsdp_config only with it")


def _trainer_fsdp(exp: Experiment, fsdp, config) -> None:
    """TrainingArguments' `fsdp` ("full_shard auto_wrap", "shard_grad_op offload", a list, or true) and
    `fsdp_config` (FSDP2 unless it says version 1, as transformers 5 reads them) as accelerate's plugin settings,
    which launch.accelerate_fsdp turns into the fsdp group."""

    if config is not None and not isinstance(config, dict):
        exp.lack("fsdp_config", f"{config!r}: a mapping (a path to a JSON file is not read by the importer)")
        return
    settings = {k.removeprefix("fsdp_"): v for k, v in (config or {}).items()}
    if "cpu_offload" in settings:  # transformers' name for accelerate's offload_params
        settings["offload_params"] = settings.pop("cpu_offload")
    settings.setdefault("version", 2)
    items = fsdp.split() if isinstance(fsdp, str) else list(fsdp) if isinstance(fsdp, list) else []
    for item in map(str, items):
        if item == "offload":
            settings["offload_params"] = True
        elif item != "auto_wrap":
            settings["sharding_strategy"] = item.upper()
    accelerate_fsdp(exp, settings)


def _vllm_device(exp: Experiment, device, trainers: int | None) -> None:
    """TRL <= 0.16's `vllm_device`: vLLM on a GPU of its own beside the trainers (`auto`: the next one after
    them, `cuda:N`: that one). grpo_exp's form of that layout is vllm=server with one reserved GPU."""
    if exp.groups.get("vllm") in (None, "off"):
        exp.ignore("vllm_device", device, "use_vllm is false: TRL never started vLLM")
        return
    index = re.fullmatch(r"cuda:(\d+)", str(device))
    if device != "auto" and index is None:
        exp.lack("vllm_device", f"{device!r}: TRL <= 0.16 took auto or cuda:<N>")
        return
    if index is not None and trainers is not None and int(index.group(1)) < trainers:
        exp.lack(
            "vllm_device",
            f"{device} is one of the {trainers} training GPUs (TRL <= 0.16 then shared it with that rank); grpo_exp "
            "gives vLLM GPUs of its own (vllm=server) or a share of every GPU (vllm=colocate)",
        )
        return
    exp.choose("vllm", "server", "vllm_device")
    exp.set("vllm.gpus", 1, f"vllm_device: {device} (TRL <= 0.16: vLLM on a GPU of its own beside the trainers)")
    exp.notes.append(f"vllm_device {device}: vLLM serves from one GPU of its own (vllm=server, vllm.gpus=1)")


def _vllm_dtype(exp: Experiment, dtype) -> None:
    """TRL <= 0.16's `vllm_dtype`: grpo_exp's vLLM serves in model.dtype, so the field carries over when it
    says the same (or auto: the checkpoint's own)."""
    said = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16"}.get(str(dtype), dtype)
    model = exp.values.get("model.dtype", ("auto",))[0]
    if said in (None, "auto", model) or (model == "auto" and said == "bfloat16"):
        exp.ignore("vllm_dtype", dtype, f"vLLM serves in model.dtype ({model}), as the recipe's vLLM did")
    else:
        exp.lack("vllm_dtype", f"{dtype!r}: grpo_exp's vLLM serves in model.dtype ({model}); set torch_dtype alike")


def _evaluation(exp: Experiment, test_split) -> None:
    """TRL's and open-r1's scripts evaluate on dataset[dataset_test_split] (default "test") when
    eval_strategy is not "no": the held-out prompts are that split of the same dataset."""
    strategy = exp.values.get("trainer.eval_strategy", ("no",))[0]
    if strategy in ("no", None, False):
        if test_split is not None:
            exp.ignore("dataset_test_split", test_split, "read only when eval_strategy is not no")
        return
    if test_split is not None and not is_text(test_split):
        exp.lack("dataset_test_split", f"{test_split!r}: a split name")
    elif test_split is not None:
        exp.set("data.eval_split", test_split, "dataset_test_split")
    else:
        exp.set("data.eval_split", "test", "eval_strategy (TRL's scripts evaluate on dataset_test_split, default test)")


def _quantization(exp: Experiment, q: dict) -> None:
    """TRL's load_in_4bit / load_in_8bit (with bnb_4bit_quant_type, use_bnb_nested_quant) under use_peft: the
    base weights quantized, LoRA adapters on top, which grpo_exp's peft=qlora is. Without adapters TRL would
    try to train the quantized weights themselves: refused."""
    if not q:
        return
    bits = 8 if q.get("load_in_8bit") is True else 4 if q.get("load_in_4bit") is True else None
    if bits is None:
        for name, value in q.items():
            exp.ignore(name, value, "no 4- or 8-bit loading was asked for (load_in_4bit / load_in_8bit)")
        return
    source = "load_in_8bit" if bits == 8 else "load_in_4bit"
    if exp.groups.get("peft") != "lora":
        exp.lack(source, "quantized base weights cannot train: TRL needs use_peft: true beside it (peft=qlora)")
        return
    exp.choose("peft", "qlora", "use_peft")
    exp.set("model.quantization.bits", bits, f"{source} (peft=qlora)")
    for name, key in (("bnb_4bit_quant_type", "quant_type"), ("use_bnb_nested_quant", "double_quant")):
        if name in q:
            exp.set(f"model.quantization.{key}", q[name], name)
