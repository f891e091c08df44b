"""Host RAM of one node: what a run keeps in the node's memory rather than on its GPUs, added up over the
node's processes. Pure functions of `Inputs` and the per-GPU estimate (memory.py); bytes until reported in GiB.

When host RAM runs out, the kernel's OOM killer ends a process with SIGKILL and no Python error: the plan
checks it before launch, as it checks the GPUs. Two moments bound a node's RAM:

    load    every rank reads the checkpoint into host memory before it moves or shards it
            (fsdp.cpu_ram_efficient_loading: rank 0 only; ZeRO-3's zero.Init: partitioned while loading)
    train   what stays there: offloaded optimizer states and weights (DeepSpeed offload, FSDP2 cpu_offload)
            with their pinned staging buffers, a sleeping colocated vLLM's weights, and every process

On CPU ranks the per-rank plan is host memory already: a node holds its ranks' peaks.
"""

from dataclasses import dataclass

from grpo_exp import GIB
from grpo_exp.planning import calibration, vllm_engine
from grpo_exp.planning.inputs import Inputs
from grpo_exp.planning.memory import RoleEstimate, sync_copy_bytes

# Resident host memory of one process before any tensor of the run: Python, torch, transformers and trl
# (0.5 GiB, measured here on CPU ranks: memory.CPU_RUNTIME), and for a GPU rank the CUDA driver, cuBLAS /
# cuDNN / NCCL libraries and their host-side state (typically 2-3 GiB; not measured here: no GPU).
HOST_RUNTIME_GPU_RANK = 3.0 * GIB
# A `vllm serve` node: the API server, the engine core and one worker per GPU, each with CUDA's host state.
HOST_RUNTIME_VLLM_SERVER = 4.0 * GIB
HOST_RUNTIME_VLLM_WORKER = 2.0 * GIB


@dataclass
class NodeHost:
    node: int
    ranks: int  # training processes on the node
    components: dict[str, float]  # bytes
    phases: dict[str, float]  # bytes: load, train
    capacity: float | None  # None: not known (topology.host_memory_gib unset for a cluster)

    @property
    def peak(self) -> float:
        return max(self.phases.values())

    @property
    def fits(self) -> bool:
        return self.capacity is None or self.peak <= self.capacity

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "ranks": self.ranks,
            "peak_gib": self.peak / GIB,
            "capacity_gib": self.capacity / GIB if self.capacity is not None else None,
            "fits": self.fits,
            "components_gib": {k: v / GIB for k, v in self.components.items()},
            "phases_gib": {k: v / GIB for k, v in self.phases.items()},
        }


def offloaded_per_rank(x: Inputs) -> dict[str, float]:
    """What one training rank keeps in host RAM beyond its runtime, by the same state formulas as the GPU
    side (memory.model_states) with the offloaded terms moved here."""
    trainable = x.lora_params or x.params
    tb = 4 if x.lora_params else x.dtype_bytes
    frozen_bytes = x.base_weight_bytes() if x.lora_params else 0.0
    states = weights = pinned = 0.0
    if x.fsdp and x.fsdp_offload:  # FSDP2 CPUOffloadPolicy: the shards themselves, and AdamW's moments
        states = (trainable * tb * 4 + frozen_bytes) / x.fsdp_shard  # weights + gradients + 2 moments
    elif x.zero_stage and x.offload_optimizer:
        # DeepSpeed's CPU Adam: fp32 master partition, two fp32 moments and fp32 gradients (16 bytes per
        # trainable parameter over the world: DeepSpeed's estimate_zero*_model_states_mem_needs), gradients
        # staged through a pinned reduce bucket
        states = 16 * trainable / x.world_size
        pinned = x.reduce_bucket * 4
        if x.zero_stage == 3 and x.offload_params:
            weights = (frozen_bytes + trainable * tb) / x.world_size
    return {"offloaded_states": states, "offloaded_weights": weights, "pinned_buffers": pinned}


def _checkpoint_load(x: Inputs, ranks: int, node: int) -> float:
    """The checkpoint in host RAM while the node's ranks load it (GPU runs; a CPU rank's weights are its plan)."""
    if x.device != "cuda":
        return 0.0
    model = x.base_weight_bytes()
    if x.zero_stage == 3:  # zero.Init: each rank keeps its partition as the checkpoint streams in
        return ranks * model / x.world_size + model / max(1, ranks)  # plus one shard file's worth in flight
    if x.fsdp and x.fsdp_ram_efficient_loading:
        return model if node == 0 else 0.0
    return ranks * model


def estimate_node(x: Inputs, gpu: RoleEstimate, node: int, ranks: int, serves: int, capacity: float | None) -> NodeHost:
    """Host RAM of node `node`: `ranks` training processes, `serves` vLLM server GPUs (0: none there)."""
    c: dict[str, float] = {}
    if x.device == "cuda":
        c["runtime"] = ranks * HOST_RUNTIME_GPU_RANK
        if serves:
            c["runtime"] += HOST_RUNTIME_VLLM_SERVER + serves * HOST_RUNTIME_VLLM_WORKER
        c["runtime"] *= dict(x.calibration).get(calibration.HOST, 1.0)  # preflight.calibration, from measured nodes
        # vLLM sleep mode (colocated): level 1 parks the engine's weights in host RAM between generations
        colocated_weights = x.base_weight_bytes(2 if not x.prequantized else None) / x.vllm_tp
        c["vllm_sleeping_weights"] = ranks * colocated_weights if x.vllm_mode == "colocate" and x.vllm_sleep else 0.0
        # vllm.weight_sync=filesystem: global rank 0 (node 0) copies the policy to host RAM and writes it
        files = node == 0 and ranks and x.vllm_mode == "server" and x.weight_sync == "filesystem"
        c["weight_sync_copy"] = sync_copy_bytes(x) if files else 0.0
    else:
        c["training_processes"] = ranks * gpu.peak  # the per-process plan is host RAM (runtime included)
        if serves:  # a vLLM server on CPU: its engine is host RAM too
            c["vllm_server"] = vllm_engine.estimate(x, server=True).peak
    for name, value in offloaded_per_rank(x).items():  # host RAM on either device (the GPU plan left it out)
        c[name] = ranks * value
    c["checkpoint_load"] = _checkpoint_load(x, ranks, node)
    steady = sum(v for k, v in c.items() if k != "checkpoint_load")
    phases = {"load": c.get("runtime", 0.0) + c["checkpoint_load"], "train": steady}
    return NodeHost(node, ranks, c, phases, capacity)


def estimate(x: Inputs, gpu: RoleEstimate, nodes: list[tuple[int, int]], capacity: float | None) -> list[NodeHost]:
    """Every node of the plan: `nodes` is (training processes, vLLM server GPUs) per node."""
    return [estimate_node(x, gpu, i, ranks, serves, capacity) for i, (ranks, serves) in enumerate(nodes)]


def fixes(x: Inputs, node: NodeHost) -> list[str]:
    """What brings a node back under its RAM, ranked by what it saves (the largest term first)."""
    if node.fits or node.capacity is None:  # (no capacity given: nothing to fit under)
        return []
    over = (node.peak - node.capacity) / GIB
    c = node.components
    out = []
    if c.get("offloaded_weights"):
        out.append(
            (c["offloaded_weights"], "keep the weights on the GPUs: deepspeed.zero_optimization.offload_param=null")
        )
    if c.get("offloaded_states") and x.fsdp:
        out.append((c["offloaded_states"], "fsdp=full_shard (no CPU offload), or more nodes to shard over"))
    elif c.get("offloaded_states"):
        out.append((c["offloaded_states"], f"deepspeed=zero{x.zero_stage} (no offload), or more nodes to shard over"))
    if c.get("vllm_sleeping_weights"):
        out.append((c["vllm_sleeping_weights"], "vllm.enable_sleep_mode=false, or vllm=server"))
    if node.phases["load"] >= node.phases["train"] and c.get("checkpoint_load") and x.fsdp:
        out.append((c["checkpoint_load"], "fsdp.cpu_ram_efficient_loading=true (rank 0 reads the checkpoint)"))
    if node.ranks > 1:
        per_rank = node.peak / node.ranks
        out.append((per_rank, f"fewer training processes per node (each adds ~{per_rank / GIB:.1f} GiB)"))
    ranked = [text for _, text in sorted(out, key=lambda item: -item[0])]
    return [f"host RAM of node {node.node} is {over:.1f} GiB short: {text}" for text in ranked]
