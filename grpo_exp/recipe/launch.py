"""How the recipe was launched: accelerate's config (or the launch command's --num_processes /
--num_machines) becomes the topology, its DeepSpeed plugin or a DeepSpeed JSON the deepspeed group, its
FSDP plugin the fsdp group."""

from pathlib import Path

from grpo_exp import CONF_DIR
from grpo_exp.recipe.experiment import Experiment, load

# accelerate keys that only say how accelerate launches: grpo_exp launches with torchrun or SLURM itself.
LAUNCHER_ONLY = {
    "compute_environment",
    "debug",
    "downcast_bf16",
    "dynamo_config",
    "enable_cpu_affinity",
    "main_training_function",
    "rdzv_backend",
    "same_network",
    "tpu_env",
    "tpu_use_cluster",
    "tpu_use_sudo",
    "use_cpu",
    "gpu_ids",
    "deepspeed_multinode_launcher",
    "zero3_init_flag",
    "machine_rank",  # per node: grpo_exp reads topology.node_rank (NODE_RANK) on each node, not from the recipe
}


def to_int(value) -> int | None:
    """A count from accelerate's config or the command line: an int, or a string of digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _topology(exp: Experiment, machines: int, trainers: int, source: str) -> None:
    """`trainers` training processes in all over `machines` nodes; where vLLM has GPUs of its own (server
    mode), each node has those GPUs beside its trainers: accelerate counted trainers only."""
    if machines < 1 or trainers < machines or trainers % machines:
        exp.lack(source, f"{trainers} processes over {machines} machine(s): a whole number of processes per machine")
        return
    per_node = trainers // machines
    vllm_gpus = 0
    if exp.groups.get("vllm") == "server":
        gpus = exp.values.get("vllm.gpus", (None,))[0]
        vllm_gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else 1
        exp.notes.append(
            f"accelerate's processes are the trainers: {per_node} per node, and the node has {vllm_gpus} more GPU(s) "
            "for vLLM"
        )
        if machines > 1:  # every node keeps the recipe's trainer count (grpo_exp reserves the GPUs on node 0)
            exp.set("topology.symmetric", True, f"{source}: {per_node} trainers on every node, as the recipe ran")
    name = f"{machines}x{per_node + vllm_gpus}"
    exp.choose("topology", name if (CONF_DIR / "topology" / f"{name}.yaml").exists() else "1x8", source)
    exp.set("topology.nnodes", machines, "accelerate num_machines", source)
    vllm_part = f" + {vllm_gpus} vLLM GPU(s)" if vllm_gpus else ""
    exp.set("topology.gpus_per_node", per_node + vllm_gpus, f"{source} ({trainers}) / num_machines{vllm_part}", source)


def accelerate_config(exp: Experiment, acc: dict, num_processes=None, num_machines=None) -> None:
    """accelerate's launch config: processes and machines become the topology, its DeepSpeed plugin
    the deepspeed group, mixed precision the trainer's (and the model's dtype when the recipe has none).
    The launch command's --num_processes / --num_machines override the file's, as accelerate does."""
    machines = to_int(num_machines if num_machines is not None else acc.get("num_machines", 1))
    processes = to_int(num_processes if num_processes is not None else acc.get("num_processes", 1))
    if machines is None or processes is None:
        exp.lack("accelerate num_processes", f"{acc.get('num_processes')!r} / {acc.get('num_machines')!r}: counts")
    else:
        said = [
            f"--num-processes {num_processes}" if num_processes is not None else None,
            f"--num-machines {num_machines}" if num_machines is not None else None,
        ]
        if any(said):
            file_said = f"; the accelerate file said {acc.get('num_processes')}" if "num_processes" in acc else ""
            exp.notes.append(f"processes from the launch command ({', '.join(s for s in said if s)}{file_said})")
        _topology(exp, machines, processes, "accelerate num_processes")
    for name, key in (("main_process_ip", "topology.master_addr"), ("main_process_port", "topology.master_port")):
        if acc.get(name) is not None:
            exp.set(key, acc[name], f"accelerate {name}")
    precision = acc.get("mixed_precision")
    if precision in ("bf16", "fp16"):
        exp.set(f"trainer.{precision}", True, "accelerate mixed_precision")
        if "model.dtype" not in exp.values:
            exp.set("model.dtype", "bfloat16" if precision == "bf16" else "float16", "accelerate mixed_precision")
    elif precision not in (None, "no", False):
        exp.lack("accelerate mixed_precision", f"{precision}: grpo_exp trains in bf16, fp16 or fp32")
    kind = acc.get("distributed_type")
    if kind == "DEEPSPEED":
        accelerate_deepspeed(exp, acc.get("deepspeed_config") or {})
    elif kind == "FSDP":
        exp.choose("deepspeed", "none", "accelerate distributed_type")
        accelerate_fsdp(exp, acc.get("fsdp_config") or {})
    elif kind in ("MULTI_GPU", "NO", None):
        exp.choose("deepspeed", "none", "accelerate distributed_type", replace=False)
    else:
        exp.lack("accelerate distributed_type", f"{kind!r}: grpo_exp runs DDP (MULTI_GPU) or DeepSpeed")
    known = {
        "num_machines",
        "num_processes",
        "main_process_ip",
        "main_process_port",
        "mixed_precision",
        "distributed_type",
        "deepspeed_config",
        "fsdp_config",
    }
    for name in set(acc) - LAUNCHER_ONLY - known:
        exp.lack(f"accelerate {name}", "not an accelerate setting grpo_exp knows")


# accelerate's FSDP1 sharding strategies (fsdp_sharding_strategy, or fsdp_reshard_after_forward in FSDP1 files)
# as FSDP2 options: the same sharding of the states, by torch's fully_shard.
FSDP1_STRATEGIES = {
    "FULL_SHARD": ("full_shard", {}),
    "SHARD_GRAD_OP": ("full_shard", {"fsdp.reshard_after_forward": False}),  # ZeRO-2-like: gathered until backward
    "HYBRID_SHARD": ("hybrid_shard", {}),
    "HYBRID_SHARD_ZERO2": ("hybrid_shard", {"fsdp.reshard_after_forward": False}),
}
# accelerate fsdp_config keys (without fsdp_) that are fsdp group keys verbatim.
FSDP_KEYS = ("activation_checkpointing", "cpu_ram_efficient_loading", "state_dict_type", "auto_wrap_policy")
# FSDP1 settings FSDP2 has no counterpart for (it prefetches, keeps original parameters and syncs states itself).
FSDP1_ONLY = ("backward_prefetch", "forward_prefetch", "use_orig_params", "sync_module_states", "min_num_params")


def accelerate_fsdp(exp: Experiment, fsdp: dict) -> None:
    """accelerate's FSDP plugin settings into the fsdp group. FSDP1 files (fsdp_version 1, TRL's fsdp1.yaml) are
    imported as FSDP2 with the same sharding (transformers deprecates FSDP1), with a note saying so."""
    if not isinstance(fsdp, dict):
        exp.lack("accelerate fsdp_config", f"{fsdp!r}: a mapping of FSDP plugin settings")
        return
    settings = {k.removeprefix("fsdp_"): v for k, v in fsdp.items()}
    version = to_int(settings.get("version", 1))  # accelerate's default is FSDP1
    reshard = settings.get("reshard_after_forward", True)
    strategy = settings.get("sharding_strategy", reshard if isinstance(reshard, str) else None)
    option, values = "full_shard", dict[str, bool]()
    if isinstance(strategy, (str, int)) and not isinstance(strategy, bool):
        names = list(FSDP1_STRATEGIES) + ["NO_SHARD"]  # accelerate also takes the 1-based number
        name = names[int(strategy) - 1] if str(strategy).isdigit() and 1 <= int(strategy) <= 5 else str(strategy)
        if name.upper() == "NO_SHARD":
            exp.choose("fsdp", "none", "accelerate fsdp_config")
            exp.notes.append("accelerate FSDP with NO_SHARD is data parallel: imported as fsdp=none (DDP)")
            return
        if name.upper() not in FSDP1_STRATEGIES:
            exp.lack("accelerate fsdp_config.sharding_strategy", f"{strategy!r}: one of {', '.join(names)}")
            return
        option, values = FSDP1_STRATEGIES[name.upper()]
    elif isinstance(reshard, bool):
        values = {} if reshard else {"fsdp.reshard_after_forward": False}
    if version != 2:
        exp.notes.append(
            f"accelerate FSDP{version} imported as FSDP2 ({option}): the same sharding by torch's fully_shard; "
            "transformers deprecates FSDP1"
        )
    if settings.get("offload_params") is True:
        option = "full_shard_offload" if option == "full_shard" else option
        values["fsdp.cpu_offload"] = True
    exp.choose("fsdp", option, "accelerate fsdp_config")
    for key, value in values.items():
        exp.set(key, value, "accelerate fsdp_config")
    for name in FSDP_KEYS:
        if settings.get(name) is not None:
            exp.set(f"fsdp.{name}", settings[name], f"accelerate fsdp_{name}")
    layers = settings.get("transformer_layer_cls_to_wrap")
    if layers:
        exp.set(
            "fsdp.transformer_layer_cls_to_wrap",
            [layers] if isinstance(layers, str) else list(layers),
            "accelerate fsdp_transformer_layer_cls_to_wrap",
        )
    handled = {
        "version",
        "reshard_after_forward",
        "sharding_strategy",
        "offload_params",
        "transformer_layer_cls_to_wrap",
    }
    for name in set(settings) - handled - set(FSDP_KEYS):
        if name in FSDP1_ONLY:
            exp.ignore(f"accelerate fsdp_{name}", settings[name], "an FSDP1 setting; FSDP2 has no counterpart")
        else:
            exp.lack(f"accelerate fsdp_config.fsdp_{name}", "not an accelerate FSDP setting grpo_exp knows")


def accelerate_deepspeed(exp: Experiment, ds: dict) -> None:
    if not isinstance(ds, dict):
        exp.lack("accelerate deepspeed_config", f"{ds!r}: a mapping of DeepSpeed plugin settings")
        return
    if ds.get("deepspeed_config_file"):
        deepspeed_json(exp, load(Path(ds["deepspeed_config_file"])), "accelerate deepspeed_config_file")
        return
    stage = to_int(ds.get("zero_stage", 2))
    if stage not in (0, 1, 2, 3):
        exp.lack("accelerate deepspeed_config.zero_stage", f"{ds.get('zero_stage')!r}: 0, 1, 2 or 3")
        return
    offload = ds.get("offload_optimizer_device") not in (None, "none") or ds.get("offload_param_device") not in (
        None,
        "none",
    )
    option = "none" if stage == 0 else f"zero{stage}_offload" if offload and stage in (2, 3) else f"zero{stage}"
    exp.choose("deepspeed", option, "accelerate deepspeed_config")
    if ds.get("zero3_save_16bit_model") is not None and stage == 3:
        exp.set(
            "deepspeed.zero_optimization.stage3_gather_16bit_weights_on_model_save",
            bool(ds["zero3_save_16bit_model"]),
            "accelerate zero3_save_16bit_model",
        )
    if ds.get("gradient_accumulation_steps") not in (None, "auto"):
        exp.set(
            "trainer.gradient_accumulation_steps",
            ds["gradient_accumulation_steps"],
            "accelerate deepspeed gradient_accumulation_steps",
        )
    if ds.get("gradient_clipping") not in (None, "auto"):
        exp.set("trainer.max_grad_norm", ds["gradient_clipping"], "accelerate deepspeed gradient_clipping")
    known = {
        "zero_stage",
        "offload_optimizer_device",
        "offload_param_device",
        "zero3_save_16bit_model",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "deepspeed_config_file",
    }
    for name in set(ds) - LAUNCHER_ONLY - known:
        exp.lack(f"accelerate deepspeed_config.{name}", "not an accelerate DeepSpeed setting grpo_exp knows")


def deepspeed_json(exp: Experiment, ds: dict, source: str) -> None:
    """A DeepSpeed JSON as it is: the deepspeed group holds DeepSpeed's own format."""
    stage = (ds.get("zero_optimization") or {}).get("stage", 0)
    exp.choose("deepspeed", f"zero{stage}" if stage in (1, 2, 3) else "none", source)
    exp.set("deepspeed", ds, f"{source} (DeepSpeed's JSON, replacing the option's values)", source)
