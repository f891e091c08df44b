"""What to change when a plan does not fit: the ranked fixes (`suggest`) and the change that keeps the
experiment the same (`fit`, preflight.on_oom=fit). Each candidate is re-planned with memory.estimate.
"""

from dataclasses import replace
from typing import Any

from omegaconf import DictConfig

from grpo_exp import DECODER_LINEAR_LAYERS, GIB
from grpo_exp.planning.inputs import Inputs, inputs
from grpo_exp.planning.lora import lora_params
from grpo_exp.planning.memory import Estimate, estimate

Change = tuple[str, Any, Inputs, str]  # a ranked fix: its key, its value, the inputs it makes, what it says
Edit = tuple[str, Any, Any]  # on_oom=fit's change to the config: its key, its old value, its new one


def _largest(lo: int, hi: int, fits) -> int | None:
    """Largest value in [lo, hi] for which fits(value) holds, assuming monotonic; None if none."""
    if not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _peak(e: Estimate) -> float:
    return max(e.train.peak, e.vllm.peak if e.vllm else 0.0)


def _saved(base: Estimate, changed: Estimate) -> float:
    """Bytes a change saves on the role that binds: the training GPU or the vLLM server GPU that is
    over its capacity (a server's GPU is full by design, so the larger peak may not be the one in the way)."""
    roles = [(base.train, changed.train)]
    if base.vllm is not None and changed.vllm is not None:
        roles.append((base.vllm, changed.vllm))
    binding = [(b, c) for b, c in roles if not b.fits] or roles
    return max(b.peak - c.peak for b, c in binding)


def suggest(x: Inputs, plan) -> list[dict]:
    """Changes that would make the run fit (or help), ranked: fitting first, then by GiB saved. The launch plan
    (placement.Plan) says where more GPUs for vLLM's tensor parallelism would come from."""
    base = estimate(x)
    if base.fits:
        return []
    out = []
    for key, value, changed, text in [*_shape_changes(x), *_sharding_changes(x), *_vllm_changes(x, base, plan)]:
        e = estimate(changed)
        saved = _saved(base, e) / GIB
        if saved >= 0.05 or e.fits:  # a change that does not help is no fix (it would print "saves 0.0 GiB")
            out.append({"key": key, "value": value, "fits": e.fits, "saves_gib": round(saved, 2), "text": text})
    for item in out:
        item["text"] += f" (saves {item['saves_gib']:.1f} GiB)" if item["saves_gib"] > 0 else ""
    return sorted(out, key=lambda s: (not s["fits"], -s["saves_gib"]))


def _sized(x: Inputs, field_name: str, value: int) -> Inputs:
    size: dict[str, Any] = {field_name: value}
    return replace(x, **size)


def _bound(x: Inputs, key: str, field_name: str, lo: int, hi: int) -> list[Change]:
    """The largest value of one size that fits, or its smallest where none does (it helps, not enough alone)."""
    best = _largest(lo, hi, lambda v: estimate(_sized(x, field_name, v)).fits)
    if best is not None and best < hi:
        return [(key, best, _sized(x, field_name, best), f"{key} <= {best} fits")]
    if best is None and lo < getattr(x, field_name):
        return [(key, lo, _sized(x, field_name, lo), f"{key}={lo} helps but is not enough alone")]
    return []


def _shape_changes(x: Inputs) -> list[Change]:
    """(key, value, the inputs changed, text) for the run's sizes: batch, checkpointing, lengths, the reference."""
    changes = _bound(x, "trainer.per_device_train_batch_size", "batch", 1, x.batch)
    if not x.checkpointing:
        changes.append(
            (
                "trainer.activation_checkpointing",
                True,
                replace(x, checkpointing=True),
                "trainer.activation_checkpointing=true",
            )
        )
    changes += _bound(x, "trainer.max_completion_length", "completion", 16, x.completion)
    changes += _bound(x, "data.max_prompt_length", "prompt", 16, x.prompt)
    if x.ref_model:
        changes.append(("trainer.beta", 0.0, replace(x, ref_model=False), "trainer.beta=0.0 (no reference model)"))
    return changes


def _sharding_changes(x: Inputs) -> list[Change]:
    """ZeRO stages, FSDP2, offload and LoRA: the switches that keep the run's sizes."""
    changes: list[Change] = []
    for stage in (2, 3):
        if x.zero_stage < stage and x.world_size > 1 and not x.fsdp:
            changes.append(("deepspeed", f"zero{stage}", replace(x, zero_stage=stage), f"deepspeed=zero{stage}"))
    if not x.fsdp and not x.zero_stage and x.world_size > 1:
        changes.append(
            ("fsdp", "full_shard", replace(x, fsdp=True, fsdp_shard=x.world_size), "fsdp=full_shard (FSDP2)")
        )
    if x.fsdp and not x.fsdp_reshard:
        changes.append(
            ("fsdp.reshard_after_forward", True, replace(x, fsdp_reshard=True), "fsdp.reshard_after_forward=true")
        )
    if x.fsdp and not x.fsdp_offload and x.device == "cuda":
        changes.append(("fsdp", "full_shard_offload", replace(x, fsdp_offload=True), "fsdp=full_shard_offload"))
    if x.zero_stage >= 2 and not x.offload_optimizer:
        offloaded = replace(x, offload_optimizer=True, offload_params=x.zero_stage == 3)
        changes.append(("deepspeed", f"zero{x.zero_stage}_offload", offloaded, f"deepspeed=zero{x.zero_stage}_offload"))
    if not x.lora_params and not x.experts:  # a MoE's experts are no layers peft=lora adapts (target_parameters)
        lora = lora_params(
            x.hidden, x.heads * x.head_dim, x.kv_dim, x.intermediate, x.layers, x.vocab, 16, DECODER_LINEAR_LAYERS
        )
        adapted = replace(x, lora_params=lora, ref_model=False)
        changes.append(("peft", "lora", adapted, "peft=lora (r=16 on all linear layers)"))
    return changes


def _vllm_changes(x: Inputs, base: Estimate, plan) -> list[Change]:
    """A colocated engine's share of the GPU, its sleep and its tensor parallelism; a server that does not fit its
    GPUs: its share, its tensor parallelism, its context length."""
    changes: list[Change] = []
    if x.vllm_mode == "colocate":
        # a smaller share leaves training room; a larger one lets an engine start whose weights its share cannot hold
        today = round(x.vllm_util * 100)

        def fits_at(percent: int) -> bool:
            return estimate(replace(x, vllm_util=percent / 100)).fits

        lower = next((u for u in range(today - 1, 4, -1) if fits_at(u)), None)
        higher = None if lower else next((u for u in range(today + 1, 96) if fits_at(u)), None)
        percent = lower or higher
        if percent is not None:
            best = percent / 100
            text = f"vllm.gpu_memory_utilization <= {best:.2f}" if lower else f"vllm.gpu_memory_utilization={best:.2f}"
            changes.append(("vllm.gpu_memory_utilization", best, replace(x, vllm_util=best), text))
        if not x.vllm_sleep:
            changes.append(("vllm.enable_sleep_mode", True, replace(x, vllm_sleep=True), "vllm.enable_sleep_mode=true"))
        changes += _colocated_tensor_parallel(x, plan.gpus_per_node)
    if x.vllm_mode == "server" and base.vllm is not None and not base.vllm.fits:
        if x.vllm_util < 0.95:
            changes.append(
                ("vllm.gpu_memory_utilization", 0.95, replace(x, vllm_util=0.95), "vllm.gpu_memory_utilization=0.95")
            )
        changes += _server_tensor_parallel(x, plan)
        needed = x.prompt + x.completion
        if x.vllm_max_len > needed:
            changes.append(
                ("vllm.max_model_length", needed, replace(x, vllm_max_len=needed), f"vllm.max_model_length={needed}")
            )
    return changes


def _larger_tensor_parallel(x: Inputs, room: int, change, fits) -> list[Change]:
    """The smallest tensor_parallel_size over today's (powers of two up to `room` GPUs) whose engine `fits`, else the
    largest one tried: vLLM splits the attention heads over its TP ranks, so the size divides them. `change(tp)` is
    the fix at that size, or None where it cannot be placed."""
    tried: list[Change] = []
    tp = x.vllm_tp * 2
    while tp <= room:
        made = change(tp) if x.heads % tp == 0 else None
        if made is not None:
            tried.append(made)
            if fits(estimate(made[2])):
                break
        tp *= 2
    return tried[-1:]


def _server_tensor_parallel(x: Inputs, plan) -> list[Change]:
    """A server whose GPU does not hold its engine, on more GPUs. TRL's server runs on one node: a dedicated serving
    node's GPUs (data parallel over them, so the size divides them), or a training node's but one, where each GPU it
    gains is one training rank fewer on every node that leaves it GPUs (and in an FSDP2 shard group over them).
    Judged by the server's own verdict: training may not fit for other reasons."""
    hosts, reserved, node_gpus = plan.server_hosts(), plan.vllm["gpus"], plan.gpus_per_node
    room = node_gpus - 1 if hosts else node_gpus

    def change(tp: int) -> Change | None:
        gpus = -(-reserved // tp) * tp if hosts else node_gpus  # a multiple of tp: its data parallel
        if gpus % tp or gpus > room:
            return None
        fewer = (gpus - reserved) * hosts
        world = x.world_size - fewer
        if x.fsdp_shard == x.world_size:  # FSDP2 over every rank (or no FSDP2: the world, as inputs.py has it)
            shard = world
        elif hosts and x.fsdp_shard == node_gpus - reserved:  # shard_group=node, every node leaving the server GPUs
            shard = node_gpus - gpus
        else:
            shard = x.fsdp_shard
        text = f"vllm.tensor_parallel_size={tp}" + (f" vllm.gpus={gpus}" if hosts else "")
        text += f" ({fewer} training rank(s) fewer)" if fewer else ""
        changed = replace(x, vllm_tp=tp, world_size=world, fsdp_shard=shard)
        return ("vllm.tensor_parallel_size", tp, changed, text)

    return _larger_tensor_parallel(x, room, change, lambda e: e.vllm is not None and e.vllm.fits)


def _colocated_tensor_parallel(x: Inputs, node_gpus: int) -> list[Change]:
    """A colocated engine shared by more training ranks: TRL groups tensor_parallel_size ranks (the size divides
    the world size) into one engine that holds 1/tp of the weights on each and generates for all of them (its
    max_num_seqs grows with it); one node's GPUs at most, so the group's NCCL stays on the node."""

    def change(tp: int) -> Change | None:
        if x.world_size % tp:
            return None
        seqs = x.vllm_max_seqs // x.vllm_tp * tp  # per-device batch x TP x steps per generation
        return (
            "vllm.tensor_parallel_size",
            tp,
            replace(x, vllm_tp=tp, vllm_max_seqs=seqs),
            f"vllm.tensor_parallel_size={tp}",
        )

    return _larger_tensor_parallel(x, node_gpus, change, lambda e: e.fits)


def fit(cfg: DictConfig, plan) -> list[Edit] | None:
    """preflight.on_oom=fit: the changes (key, old, new) that make a predicted OOM fit while the
    experiment stays the same, or None. First a smaller per-device batch with more accumulation
    steps (the batch per optimizer step and the generation batch unchanged: the same updates,
    more micro-steps), then memory-only switches (activation checkpointing, vLLM sleep mode,
    optimizer offload), then both."""
    x = inputs(cfg, plan)
    t = cfg.trainer
    switches: list[tuple[list[Edit], dict[str, Any]]] = []
    if not x.checkpointing:
        switches.append(
            ([("trainer.activation_checkpointing", t.activation_checkpointing, True)], {"checkpointing": True})
        )
    if x.vllm_mode == "colocate" and not x.vllm_sleep:
        switches.append(([("vllm.enable_sleep_mode", False, True)], {"vllm_sleep": True}))
    if x.zero_stage >= 2 and not x.offload_optimizer:
        switches.append(
            (
                [("deepspeed.zero_optimization.offload_optimizer", None, {"device": "cpu", "pin_memory": True})],
                {"offload_optimizer": True},
            )
        )

    def split(b: int) -> tuple[list[Edit], dict[str, Any]]:
        factor = x.batch // b
        changes: list[Edit] = [
            ("trainer.per_device_train_batch_size", x.batch, b),
            (
                "trainer.gradient_accumulation_steps",
                t.gradient_accumulation_steps,
                t.gradient_accumulation_steps * factor,
            ),
        ]
        if t.steps_per_generation is not None:  # else it follows gradient_accumulation_steps
            changes.append(("trainer.steps_per_generation", t.steps_per_generation, t.steps_per_generation * factor))
        return changes, {"batch": b, "steps_per_generation": x.steps_per_generation * factor}

    divisors = [b for b in range(x.batch - 1, 0, -1) if x.batch % b == 0]
    candidates = [split(b) for b in divisors] + switches
    for changes, fields in switches:  # a switch plus the largest split that then fits
        candidates += [(changes + split(b)[0], {**fields, **split(b)[1]}) for b in divisors]
    for changes, fields in candidates:
        if estimate(replace(x, **fields)).fits:
            return changes
    return None
