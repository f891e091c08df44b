"""Per-GPU peak memory of a GRPO run, predicted before launch: the memory part of plan.json. Pure Python:
no torch import.

    inputs.py   the numbers read from the config and the launch plan, once
    memory.py   the arithmetic (pure: estimate(inputs) -> per phase, per component)
    host_memory.py  host RAM per node (offloaded states, sleeping vLLM weights, checkpoint loading, processes)
    fixes.py    what would fit when it does not (ranked), and preflight.on_oom=fit's change
    report.py   the breakdown as terminal tables
"""

from dataclasses import asdict, dataclass, replace

from omegaconf import DictConfig

from grpo_exp import GIB
from grpo_exp import data as loaders
from grpo_exp.config import env
from grpo_exp.planning import cuda_runtime, host_memory, placement, vllm_engine
from grpo_exp.planning.fixes import suggest
from grpo_exp.planning.inputs import Inputs, host_capacity_bytes, image_tokens, inputs
from grpo_exp.planning.memory import estimate, process_group_bytes, sync_copy_bytes
from grpo_exp.planning.plan_rules import generation_batch_size


@dataclass
class MemoryPlan:
    """The memory plan of one run, as the driver, the launchers and the report read it; to_dict() is the memory part
    of plan.json (plan_file.py). The roles' figures are RoleEstimate.to_dict()'s: peak_gib, capacity_gib,
    headroom_gib, fits, components_gib, phases_gib, notes."""

    fits: bool  # every GPU (or CPU process) and every node's host RAM within its capacity
    device: str  # cuda | cpu
    train: dict  # one training GPU (on CPU: one training process)
    vllm: dict | None  # one vLLM server GPU (vllm=server), else None
    host: list[dict]  # host RAM per kind of node: host_memory's figures and `nodes`, the node ranks alike
    errors: list[str]  # why it does not fit
    suggestions: list[dict]  # what would fit, ranked (fixes.suggest): {text, overrides, fits, ...}
    notes: list[str]  # what the plan assumed or could not model; the driver and the launcher add theirs
    env: dict | None  # the environment's episodes (data=none / env=...), as the plan counts them
    vllm_engine: dict | None  # one vLLM engine GPU as vllm_engine.py lays it out
    weight_sync: dict | None  # how the trainer's weights reach vLLM, and what that holds

    def to_dict(self) -> dict:
        return asdict(self)


def memory_plan(cfg: DictConfig, plan) -> MemoryPlan:
    """The memory plan of `cfg` on the launch plan `plan`."""
    x = inputs(cfg, plan)
    e = estimate(x)
    nodes = [(n.train_procs, max(len(n.vllm_gpus), "vllm" in n.commands)) for n in plan.nodes]  # a CPU server: 1
    hosts = host_memory.estimate(x, e.train, nodes, host_capacity_bytes(cfg, plan))
    errors = [] if e.vllm is None or e.vllm.fits else [f"vLLM engine: {n}" for n in e.vllm.notes[:1]]
    errors += [line for node in _distinct(hosts) for line in _host_errors(x, node)]
    notes = _card_notes(plan, x) + _prompt_notes(cfg, x) + _loopback_notes(cfg, plan)
    if loaders.prompts_from_environment(cfg.data) and cfg.data.max_prompt_length:
        notes.append(
            f"data=none: the environment's reset() gives every prompt; planned at data.max_prompt_length="
            f"{cfg.data.max_prompt_length} tokens (no data to scan: set it to reset()'s longest prompt)"
        )
    notes += list(cfg.model.get("planner_notes") or [])  # what this architecture has that the formulas do not model
    notes += _setting_notes(cfg, x) + _episode_notes(cfg, x) + _costly_switch_notes(x, e.fits)
    if cfg.topology.host_memory_gib is None and hosts and hosts[0].capacity is None:
        notes.append(
            "topology.host_memory_gib is null: host RAM per node is planned, not checked (set it to the nodes' RAM)"
        )
    return MemoryPlan(
        fits=e.fits and all(node.fits for node in hosts),
        device=plan.device,
        train=e.train.to_dict(),
        vllm=e.vllm.to_dict() if e.vllm else None,
        host=[{**node.to_dict(), "nodes": same} for node, same in _distinct(hosts, with_nodes=True)],
        errors=errors + [n for n in e.train.notes],
        suggestions=suggest(x, plan),
        notes=notes,
        env=episode(cfg, plan.world_size),
        vllm_engine=engine(x),
        weight_sync=weight_sync(x),
    )


def _card_notes(plan, x: Inputs) -> list[str]:
    """The card the plan assumed, and where its CUDA runtime comes from."""
    if plan.device != "cuda":
        return []
    notes = [cuda_runtime.describe(x.card, x.cuda_lazy, x.card_runtime, process_group_bytes(x), x.world_size)]
    if plan.card_source == "assumed":
        notes.insert(
            0,
            f"no GPU detected here and topology.gpu_memory_gib is null: each GPU planned as {plan.gpu_memory_gib:.0f} "
            "GiB (set topology.gpu_memory_gib, or plan on the node that runs it)",
        )
    return notes


def _loopback_notes(cfg: DictConfig, plan) -> list[str]:
    """Nodes that rendezvous on a loopback address: only processes on this machine can join."""
    addr = str(cfg.topology.master_addr)
    if len(plan.nodes) < 2 or not is_loopback(addr):
        return []
    return [
        f"{len(plan.nodes)} nodes rendezvous at topology.master_addr={addr}, a loopback address: only processes on "
        "this machine can join, and a node on another host waits out topology.rendezvous_timeout_s; on a cluster set "
        "topology.master_addr (or MASTER_ADDR) to node 0's address"
    ]


def is_loopback(addr: str) -> bool:
    import ipaddress

    if addr.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:  # a host name
        return False


def _prompt_notes(cfg: DictConfig, x: Inputs) -> list[str]:
    """How many prompt tokens the plan holds, where that is not data.max_prompt_length."""
    bound = cfg.data.max_prompt_length
    if x.prompt < (bound or 512):
        return [
            f"prompts planned at {x.prompt} tokens: the longest of the data's prompts in the model's tokens, chat "
            f"template included (data.max_prompt_length={bound} bounds them; TRL pads a batch to its longest)"
        ]
    return [] if bound else ["data.max_prompt_length is null: prompts assumed to be 512 tokens"]


def _distinct(hosts: list, with_nodes: bool = False) -> list:
    """Nodes whose host plans are alike, once (a 64-node plan has two or three kinds): the first of each kind,
    with the indices of every node like it when `with_nodes`."""
    kinds: dict = {}
    for node in hosts:
        key = (node.ranks, tuple(sorted(node.components.items())))
        kinds.setdefault(key, (node, []))[1].append(node.node)
    return list(kinds.values()) if with_nodes else [node for node, _ in kinds.values()]


def _host_errors(x: Inputs, node) -> list[str]:
    if node.fits:
        return []
    need = f"host RAM of node {node.node}: needs {node.peak / GIB:.1f} GiB of {node.capacity / GIB:.1f} GiB"
    parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in node.components.items() if v)
    return [f"{need} ({parts} GiB; the kernel's OOM killer ends a rank with SIGKILL)"] + host_memory.fixes(x, node)


def engine(x: Inputs) -> dict | None:
    """plan.json's `vllm_engine`: one engine GPU as vLLM will lay it out (colocated: on each training GPU;
    server: on each server GPU), with the shape it was planned at; None without vLLM."""
    if x.vllm_mode == "off":
        return None
    e = vllm_engine.estimate(x, server=x.vllm_mode == "server")
    return {
        "components_gib": {k: v / GIB for k, v in e.components.items()},
        "budget_gib": e.budget / GIB,
        "kv_tokens": e.kv_tokens,
        # one max_model_len request's share of the KV cache (sliding layers at their window, state layers a page)
        "request_gib": e.request_bytes / GIB,
        "max_concurrency": e.concurrency,
        "starts": e.starts,
        "notes": e.notes,
        "graphs_inside_budget": vllm_engine.graphs_inside(x.vllm_version),
        "max_num_batched_tokens": x.vllm_batched_tokens,
        "max_num_seqs": x.vllm_max_seqs,
        "vllm_version": ".".join(map(str, x.vllm_version)) if x.vllm_version else None,
    }


# The disk bandwidth a filesystem weight sync is timed at: a local NVMe or a good shared filesystem writes 1-2 GB/s;
# the time doubles on one that writes half that (the measured weight_sync phase says what it took).
SYNC_DISK_BYTES_PER_S = 1e9


def weight_sync(x: Inputs) -> dict | None:
    """plan.json's `weight_sync`: how a server gets the policy's weights; for files, per sync the bytes written (the
    disk they take; the server reads the same), rank 0's host copy, and the write time at SYNC_DISK_BYTES_PER_S."""
    if x.vllm_mode != "server":
        return None
    if x.weight_sync == "nccl":
        return {"method": "nccl", "buffers_gib": vllm_engine.WEIGHT_SYNC_BUFFERS / GIB}
    size = sync_copy_bytes(x)
    return {
        "method": "filesystem",
        "bytes": size,
        "disk_gib": size / GIB,
        "host_ram_gib": size / GIB,
        "write_s": size / SYNC_DISK_BYTES_PER_S,
        "disk_bytes_per_s": SYNC_DISK_BYTES_PER_S,
    }


def _costly_switch_notes(x: Inputs, fits: bool) -> list[str]:
    """Sleep mode and optimizer/parameter offload save memory at a cost every step (a wake-up and weight
    reload; host transfers): when the run fits without them, the plan says so."""
    if not fits:
        return []
    notes = []
    if x.vllm_mode == "colocate" and x.vllm_sleep and estimate(replace(x, vllm_sleep=False)).fits:
        notes.append(
            "fits without vllm.enable_sleep_mode too: sleep mode reloads the engine's weights and KV cache every step"
        )
    if (x.offload_optimizer or x.offload_params or x.fsdp_offload) and estimate(
        replace(x, offload_optimizer=False, offload_params=False, fsdp_offload=False)
    ).fits:
        notes.append("fits without CPU offload too: offloading moves optimizer states or weights every step")
    return notes


def episode(cfg: DictConfig, world_size: int) -> dict | None:
    """plan.json's `env`: what an agentic run's episodes are; None without tools or environments.
    `instances_per_rank`: the episodes alive at once on each rank, its share of a generation batch; with
    environments, as many instances (TRL pools them and resets one per episode)."""
    if not env.active(cfg):
        return None
    per_rank = generation_batch_size(cfg, world_size) // world_size
    if cfg.trainer.eval_strategy != "no":  # evaluation draws its own rollouts from the same pool
        per_rank = max(per_rank, cfg.trainer.per_device_eval_batch_size)
    return {
        "name": env.label(cfg),
        "tools": env.tool_names(cfg),
        "environments": sorted(n.split(".")[-1] for n in env.factories(cfg)) if cfg.env.factories else None,
        "max_tool_calling_iterations": cfg.trainer.max_tool_calling_iterations,
        "max_completion_length": cfg.trainer.max_completion_length,
        "instances_per_rank": per_rank,
    }


def _episode_notes(cfg: DictConfig, x: Inputs) -> list[str]:
    """What an agentic run's budget means, said in the plan (the memory arithmetic already sizes the episode:
    the completion it plans is max_completion_length, tool results included)."""
    if not env.active(cfg):
        return []
    rounds = cfg.trainer.max_tool_calling_iterations
    notes = [
        f"env={env.label(cfg)}: trainer.max_completion_length={x.completion} bounds the whole episode after the "
        "prompt: every turn and every tool result (masked from the loss, yet in context, activations and KV cache); "
        "a result that does not fit is dropped and the episode ends",
        f"each tool round is another generation round over the episodes that called a tool: up to "
        f"{rounds if rounds is not None else 'unlimited (trainer.max_tool_calling_iterations=null)'} per episode",
    ]
    where = cfg.env.working_dir or "the directory grpo_exp is started in (env.working_dir=null)"
    notes.append(f"the training processes run in {where}: tools, environments and rewards open relative paths there")
    names = ", ".join(env.tool_names(cfg))
    if cfg.model.name_or_path is None:
        notes.append(
            f"the tiny model is warm-started on calls of this run's tools ({names}: names, argument names and types "
            "from their schemas, cached per schema); the calls in training are sampled from its own tokens"
        )
    else:
        notes.append(
            f"tool calls ({names}) are {cfg.model.name_or_path}'s own: grpo_exp warm-starts only the tiny model, "
            "so a checkpoint that was never taught tool calls may make none"
        )
    if x.vllm_mode != "off":
        notes.append(
            f"vLLM's context must hold prompt + episode ({x.prompt + x.completion} tokens): vllm.max_model_length "
            f"{cfg.vllm.max_model_length or 'null (the model maximum)'}"
        )
    return notes


def _vision_note(cfg: DictConfig, x: Inputs) -> str:
    """What the plan holds of a vision-language model's tower: its weights, and its images where it knows them."""
    trained = "frozen under LoRA" if x.lora_params else "trained: gradients and optimizer states too"
    note = f"vision tower: {cfg.model.vision_parameters / 1e9:.2f}B of the {x.params / 1e9:.2f}B parameters ({trained})"
    if x.vision is None:
        return note + "; its images' tokens and activations are not modelled for this layout"
    if not cfg.data.images_per_prompt:
        return note + "; data.images_per_prompt=0: prompts planned without images (set it and data.image_size)"
    size = cfg.data.image_size or "the processor's max_pixels"
    tokens = image_tokens(cfg, x.vision)
    return (
        f"{note}; {cfg.data.images_per_prompt} image(s) of {size} per prompt: {tokens} prompt tokens and "
        f"{x.vision_patches} patches per completion, repeated for every generation"
    )


def _setting_notes(cfg: DictConfig, x: Inputs) -> list[str]:
    """Settings that change what runs in a way the plan reads differently from the user's intent."""
    notes = placement.cpu_notes(cfg) if x.vllm_mode != "off" and x.device == "cpu" else []
    needed = x.prompt + x.completion
    short = cfg.vllm.max_model_length is not None and cfg.vllm.max_model_length < needed
    if x.vllm_mode != "off" and short and not env.active(cfg):  # with tools it is refused (planning/plan_rules.py)
        notes.append(
            f"vllm.max_model_length {cfg.vllm.max_model_length} < prompt + completion ({needed} tokens): vLLM ends "
            "such generations at its limit, so long prompts get shorter completions (the plan sizes the KV cache by "
            "the limit)"
        )
    if (cfg.trainer.model_init_kwargs or {}).get("use_kernels"):
        notes.append(
            "trainer.model_init_kwargs.use_kernels (what trainer.use_liger_kernel now means): the hub's kernels "
            "replace layers' forward; planned as the unpatched layers (their smaller activations are not modelled)"
        )
    if cfg.trainer.eval_strategy != "no":
        notes.append(
            f"evaluation generates for {cfg.trainer.per_device_eval_batch_size} held-out completions per rank "
            "(trainer.per_device_eval_batch_size) between steps: planned as no larger than a training generation batch"
        )
    if cfg.model.get("vision_parameters"):
        notes.append(_vision_note(cfg, x))
    if x.vllm_mode == "off" and cfg.trainer.use_transformers_continuous_batching:
        notes.append(
            "trainer.use_transformers_continuous_batching: transformers reserves a paged KV cache for generate() "
            "from the "
            "free memory at start-up (ContinuousBatchingConfig); the plan counts only this rank's generation batch's "
            "KV cache"
        )
    return notes
