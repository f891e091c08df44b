"""Stage 2 of the checks: rules that need the plan - the world size the run will have, where each
process and the vLLM server go - checked on any machine (action=plan runs these too).

TRL checks its batch rules inside each process after launch, against that process's world size;
here they are checked against the world size of the whole run, before launch.
"""

from omegaconf import DictConfig

from grpo_exp import Problem, is_number
from grpo_exp.config import env
from grpo_exp.planning.calibration import load

# Below this, a CPU worker cannot even start: torch, gloo's threads and their stacks take ~1.5 GiB
# of address space, which RLIMIT_DATA counts.
CPU_MIN_LIMIT_GIB = 2.0
# Keys the batch rule reads: when one failed stage 1, the rule (and the plan) would say nothing useful.
BATCH_INPUTS = {
    "trainer.per_device_train_batch_size",
    "trainer.gradient_accumulation_steps",
    "trainer.num_generations",
    "trainer.generation_batch_size",
    "trainer.steps_per_generation",
}


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
        return [
            Problem(
                "trainer.generation_batch_size",
                "and trainer.steps_per_generation are both set; TRL derives one from the other",
                "set only one of them (null the other)",
            )
        ]
    micro = t.per_device_train_batch_size * world_size
    if t.generation_batch_size is not None and t.generation_batch_size % micro:
        return [
            Problem(
                "trainer.generation_batch_size",
                f"{t.generation_batch_size} is not a multiple of per_device_train_batch_size x world size = {micro}",
                f"use a multiple of {micro}",
            )
        ]
    generation_batch = generation_batch_size(cfg, world_size)
    if generation_batch % t.num_generations:
        fits = [g for g in range(2, generation_batch + 1) if generation_batch % g == 0]
        return [
            Problem(
                "trainer.num_generations",
                f"{t.num_generations} does not divide the generation batch {generation_batch} "
                f"(per_device_train_batch_size {t.per_device_train_batch_size} x world size {world_size} x "
                "steps_per_generation "
                f"{t.steps_per_generation or t.gradient_accumulation_steps}); every prompt needs all its completions "
                "in one batch",
                f"trainer.num_generations in {fits}, or a per_device_train_batch_size/steps_per_generation that "
                f"makes the batch a multiple of {t.num_generations}",
            )
        ]
    return []


def check_calibration(cfg: DictConfig) -> list[Problem]:
    path = cfg.preflight.calibration
    if not path:
        return []

    try:
        load(path)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        return [
            Problem(
                "preflight.calibration",
                f"cannot be read: {exc}",
                "give a file written by grpo-exp calibrate <measured run dirs>, or null",
            )
        ]
    return []


def check_topology(cfg: DictConfig, plan) -> list[Problem]:
    """Placement rules any machine can check (action=plan runs these too)."""
    topo, v = cfg.topology, cfg.vllm
    problems = []
    if not 0 <= topo.node_rank < topo.nnodes:
        problems.append(
            Problem(
                "topology.node_rank",
                f"is {topo.node_rank}, outside 0..{topo.nnodes - 1}",
                "set topology.node_rank (or NODE_RANK) to this node's index",
            )
        )
    if v.nodes:
        problems += check_serving_nodes(cfg, plan)
    elif v.mode == "server":
        gpus = v.gpus or 1
        if plan.gpus_per_node == 0:
            pass  # a CPU server: one engine beside the CPU ranks, no GPUs to reserve
        elif gpus % v.tensor_parallel_size:
            problems.append(
                Problem(
                    "vllm.gpus",
                    f"is {gpus}; the server needs a positive multiple of "
                    f"vllm.tensor_parallel_size={v.tensor_parallel_size}",
                    f"set vllm.gpus={v.tensor_parallel_size}",
                )
            )
        elif gpus >= plan.gpus_per_node:
            problems.append(
                Problem(
                    "vllm.gpus",
                    f"reserves {gpus} of node 0's {plan.gpus_per_node} GPUs, leaving none to train",
                    f"set vllm.gpus below {plan.gpus_per_node}, use vllm.nodes=1 with a node that only serves, or "
                    "vllm=colocate",
                )
            )
    if v.mode == "server":
        problems += check_weight_sync(cfg, plan)
    if v.mode != "off" and plan.device == "cpu":
        problems += check_cpu_engine(cfg)
    if cfg.fsdp.enabled and cfg.fsdp.cpu_offload and plan.device == "cpu":
        problems.append(
            Problem(
                "fsdp.cpu_offload",
                "offloads FSDP2's shards from an accelerator to the host; these ranks train on CPU (torch's "
                "CPUOffloadPolicy raises 'Cannot access accelerator device')",
                "fsdp=full_shard on CPU; keep fsdp=full_shard_offload for GPU topologies (action=plan plans it)",
            )
        )
    if v.mode == "colocate" and plan.world_size % v.tensor_parallel_size:
        problems.append(
            Problem(
                "vllm.tensor_parallel_size",
                f"{v.tensor_parallel_size} does not divide the world size {plan.world_size}; colocated vLLM groups "
                "ranks by it",
                "use a divisor of the world size",
            )
        )
    return problems


WEIGHT_SYNCS = ("auto", "nccl", "filesystem")


def check_weight_sync(cfg: DictConfig, plan) -> list[Problem]:
    """vllm.weight_sync: NCCL needs CUDA on both ends (TRL's init_communicator refuses any other device)."""
    v = cfg.vllm
    if v.weight_sync not in WEIGHT_SYNCS:
        return [Problem("vllm.weight_sync", f"is '{v.weight_sync}'", f"use one of: {', '.join(WEIGHT_SYNCS)}")]
    if v.weight_sync == "nccl" and plan.device == "cpu":
        return [
            Problem(
                "vllm.weight_sync",
                "is nccl, which needs CUDA on the trainer and the server (TRL's weight transfer refuses other "
                "devices); these ranks train on CPU",
                "set vllm.weight_sync=filesystem (auto picks it on CPU)",
            )
        ]
    return []


def check_cpu_engine(cfg: DictConfig) -> list[Problem]:
    """vLLM's CPU build (colocated or served on CPU ranks)."""
    v, problems = cfg.vllm, []
    if v.cpu_kv_cache_gib < 1:
        problems.append(
            Problem(
                "vllm.cpu_kv_cache_gib",
                f"is {v.cpu_kv_cache_gib}; vLLM's CPU build takes its KV cache in whole GiB",
                "set vllm.cpu_kv_cache_gib=1 or more",
            )
        )
    if v.enable_sleep_mode:
        problems.append(
            Problem(
                "vllm.enable_sleep_mode",
                "sleep mode frees CUDA memory (TRL calls torch.cuda.empty_cache around it); these ranks run on CPU",
                "set vllm.enable_sleep_mode=false on CPU",
            )
        )
    return problems


def check_serving_nodes(cfg: DictConfig, plan) -> list[Problem]:
    """vllm.nodes: the last node serves with all its GPUs (TRL's 4+1 layout for large models)."""
    v, nnodes, gpus = cfg.vllm, cfg.topology.nnodes, plan.gpus_per_node
    if v.mode != "server":
        return [
            Problem(
                "vllm.nodes",
                f"is {v.nodes}, but dedicated serving nodes run the vLLM server (vllm.mode is {v.mode})",
                "set vllm=server, or vllm.nodes=0",
            )
        ]
    if v.nodes > 1:
        return [
            Problem(
                "vllm.nodes",
                f"is {v.nodes}; TRL 1.16's vLLM client talks to one server (one host and port), so requests cannot "
                "be spread over several serving nodes",
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
        problems.append(
            Problem(
                "vllm.tensor_parallel_size",
                f"{v.tensor_parallel_size} does not divide the serving node's {gpus} GPUs",
                f"use a divisor of {gpus}",
            )
        )
    if v.gpus is not None and v.gpus != gpus:
        problems.append(
            Problem(
                "vllm.gpus",
                f"is {v.gpus}, but with vllm.nodes=1 the serving node serves on all its {gpus} GPUs",
                "set vllm.gpus=null, or vllm.nodes=0 to serve on vllm.gpus of node 0",
            )
        )
    return problems


def check_memory_limit(cfg: DictConfig, plan) -> list[Problem]:
    limit = cfg.memory.limit_gib
    if plan.device == "cpu" and is_number(limit) and 0 < limit < CPU_MIN_LIMIT_GIB:
        return [
            Problem(
                "memory.limit_gib",
                f"is {limit} GiB; a CPU worker needs ~1.5 GiB of address space (RLIMIT_DATA counts thread stacks) "
                "just to start torch and gloo",
                f"set memory.limit_gib >= {CPU_MIN_LIMIT_GIB:g}",
            )
        ]
    return []


def check_deepspeed_batch(cfg: DictConfig, world_size: int) -> list[Problem]:
    """deepspeed.train_batch_size against the run's world size (transformers fills and compares it)."""
    total = (cfg.deepspeed or {}).get("train_batch_size", "auto")
    t = cfg.trainer
    wanted = t.per_device_train_batch_size * world_size * t.gradient_accumulation_steps
    if isinstance(total, int) and not isinstance(total, bool) and total != wanted:
        return [
            Problem(
                "deepspeed.train_batch_size",
                f"is {total} but per_device_train_batch_size x world size x gradient_accumulation_steps "
                f"is {wanted}; transformers refuses the mismatch",
                "set deepspeed.train_batch_size=auto",
            )
        ]
    return []


def check_eval_batch(cfg: DictConfig, world_size: int) -> list[Problem]:
    """TRL's eval rule: the global eval batch holds whole prompt groups of num_generations_eval."""
    t = cfg.trainer
    if t.eval_strategy == "no":  # TRL checks it only when evaluating: do_eval and eval_strategy != "no"
        return []
    generations = t.num_generations_eval or t.num_generations
    total = t.per_device_eval_batch_size * world_size
    if total % generations:
        return [
            Problem(
                "trainer.per_device_eval_batch_size",
                f"{t.per_device_eval_batch_size} x world size {world_size} = {total} is not a multiple of "
                f"the {generations} generations per eval prompt (TRL refuses it)",
                f"use a multiple of {generations} per world size",
            )
        ]
    return []


def check_episode_length(cfg: DictConfig) -> list[Problem]:
    """An agentic run's vLLM context must hold prompt + episode: TRL ends an episode whose next tool result would
    pass the engine's max_model_len, so a shorter context silently cuts every long episode."""

    limit, prompt = cfg.vllm.max_model_length, cfg.data.max_prompt_length
    if cfg.vllm.mode == "off" or limit is None or prompt is None or not env.active(cfg):
        return []
    needed = prompt + cfg.trainer.max_completion_length
    if limit >= needed:
        return []
    return [
        Problem(
            "vllm.max_model_length",
            f"is {limit}; an episode needs prompt + every turn and tool result: data.max_prompt_length {prompt} + "
            f"trainer.max_completion_length {cfg.trainer.max_completion_length} = {needed} tokens, and TRL ends an "
            "episode whose tool result would pass vLLM's limit",
            f"vllm.max_model_length={needed} (or null: the model's own), or shorter prompts or episodes",
        )
    ]


def check(cfg: DictConfig, plan) -> list[Problem]:
    """Every stage-2 problem of `cfg` for `plan`."""
    return (
        check_topology(cfg, plan)
        + check_episode_length(cfg)
        + check_memory_limit(cfg, plan)
        + check_batch(cfg, plan.world_size)
        + check_eval_batch(cfg, plan.world_size)
        + check_deepspeed_batch(cfg, plan.world_size)
        + check_calibration(cfg)
    )
