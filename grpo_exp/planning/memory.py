"""Per-GPU peak memory of a GRPO run: the arithmetic. Pure functions of `Inputs` (inputs.py), in bytes until
reported in GiB (2**30); no torch import. Formulas, sources and known limits: docs/memory-planner.md.

`estimate(x)` plans a training GPU (every phase of a GRPO step) and, for vllm=server, a serving GPU;
`train_phase_parts` splits the train phase into the groups calibration fits.
"""

from dataclasses import dataclass, field, replace

from grpo_exp import GIB, PHASES
from grpo_exp.planning import activations, buffers, cuda_runtime, families, vision, vllm_engine
from grpo_exp.planning.calibration import GROUPS
from grpo_exp.planning.inputs import Inputs

# The caching allocator's reserve over the tensors alive at the peak on the H200 records (tests/fixtures/gpu/,
# reserved - allocated):
# 1.6%, 2.1% and 3.7% with expandable_segments; 4% covers them.
CUDA_ALLOCATOR_RESERVE = 0.04
CPU_RUNTIME = 0.5 * GIB  # per CPU process: Python + torch + transformers + trl resident (measured here: ~0.5 GiB)
# Under memory.limit_gib a CPU rank is capped by RLIMIT_DATA, which counts address space, not RSS:
# an idle worker (torch, transformers, trl imported) already holds 1.5 GiB of it (VmData, measured
# here), and tensors count from allocation, touched or not.
CPU_RUNTIME_UNDER_LIMIT = 1.5 * GIB
FRAGMENTATION = 0.05  # on CPU: what RSS holds over the live tensors (glibc's arenas), fitted on CPU ranks
# The LM head's tensors saved for backward, bytes per token per hidden unit, by the weights' bytes:
# the final hidden state and its norm's input and output (fp32 weights: three fp32 copies).
HEAD_SAVED_BYTES_PER_HIDDEN = {4: 12, 2: 8}


@dataclass
class RoleEstimate:
    components: dict[str, float]  # bytes
    phases: dict[str, float]  # bytes
    capacity: float
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> float:
        return max(self.phases.values())

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity

    def to_dict(self) -> dict:
        # unrounded: the tiny model's states are ~1e-4 GiB, and calibration compares them within 5%
        return {
            "peak_gib": self.peak / GIB,
            "capacity_gib": self.capacity / GIB,
            "headroom_gib": (self.capacity - self.peak) / GIB,
            "fits": self.fits,
            "components_gib": {k: v / GIB for k, v in self.components.items()},
            "phases_gib": {k: v / GIB for k, v in self.phases.items()},
            "notes": self.notes,
        }


def model_states(x: Inputs) -> dict[str, float]:
    """Parameters, gradients and optimizer states on one training rank (DeepSpeed's estimator
    formulas for ZeRO-1/2/3, PyTorch AdamW otherwise). Adapters train in fp32 (PEFT's default)."""
    n, wb = x.world_size, x.dtype_bytes
    trainable = x.lora_params or x.params
    tb = 4 if x.lora_params else wb  # bytes per trainable parameter (PEFT upcasts adapters)
    frozen = x.base_weight_bytes() / wb if x.lora_params else 0  # in model.dtype units, quantized layers at their bytes
    if x.fsdp:  # FSDP2: every state a DTensor sharded over the shard group, AdamW's moments beside its shard
        on_gpu = 0.0 if x.fsdp_offload else 1.0  # offloaded: in host RAM (host_memory.py), the step on CPU
        shards = x.fsdp_shard
        return {
            "weights": on_gpu * (frozen * wb + trainable * tb) / shards,
            "gradients": on_gpu * trainable * tb / shards,
            "fp32_gradients": 0.0,  # AdamW steps on the gradients backward left
            "optimizer": on_gpu * 2 * trainable * tb / shards,
        }
    if x.zero_stage == 0:
        return {
            "weights": frozen * wb + trainable * tb,
            "gradients": trainable * tb,
            "fp32_gradients": 0.0,
            "optimizer": 2 * trainable * tb,  # AdamW exp_avg + exp_avg_sq, in the parameters' dtype
        }

    def shard(b: float) -> float:
        return b / n

    weights = (frozen * wb + trainable * tb) if x.zero_stage < 3 else shard(frozen * wb + trainable * tb)
    # When each gradient copy lives (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py; docs/memory-planner.md):
    # backward reduces the 16-bit gradients into this rank's partition (`gradients`; ZeRO-1's full gradients
    # until the reduce are `zero1_full_gradients`). The fp32 copy the optimizer steps on (`fp32_gradients`)
    # is made only at step(): stage 1/2 flattens the partition to fp32 per parameter group, stage 3 one
    # sub-group at a time, freed after its update, so at most sub_group_size of them live at once. Training in
    # fp32 has no second copy; an offloaded optimizer makes it in host RAM.
    grads16 = shard(trainable * tb)
    fp32_grads = 0.0 if tb == 4 else shard(trainable * 4)
    if x.zero_stage == 3 and tb != 4:
        # a sub-group takes whole parameters' partitions until it passes sub_group_size, so one with a single
        # large partition (the embedding's) is that large whatever sub_group_size says (measured: tests/zero_probe)
        largest = x.vocab * x.hidden / n if not x.lora_params else 0
        fp32_grads = 4 * min(trainable / n, max(x.sub_group_size, largest))
    optimizer = shard(trainable * 4) + shard(trainable * 8)  # master copy + Adam moments
    if x.offload_optimizer:
        optimizer, fp32_grads = 0.0, 0.0
    if x.offload_params and x.zero_stage == 3:
        weights = 0.0
    return {"weights": weights, "gradients": grads16, "fp32_gradients": fp32_grads, "optimizer": optimizer}


def lm_head_saved(x: Inputs, tokens: int) -> float:
    """What the final norm and the fused LM head keep for backward (measured: saved_bytes.py)."""
    return tokens * x.hidden * HEAD_SAVED_BYTES_PER_HIDDEN[x.dtype_bytes]


def _fused_head(x: Inputs, b: int, seq: int, backward: bool) -> float:
    """The LM head as trl >= 1.x runs it (trl/kernels/chunked_logprob.py, patched in by GRPOTrainer):
    the (tokens x vocab) logits are never materialised. It keeps a final hidden state per token for
    backward and, while it runs, one fp32/16-bit tile of TOKEN_CHUNK_SIZE x chunk_size logits; its
    backward adds fp32 accumulators for d(hidden) and, when the LM head trains, d(weight). The tile
    is 4096 x 32768 (trl's TOKEN_CHUNK_SIZE x _CHUNKED_LOGPROB_CHUNK_SIZE): 512 MiB in fp32."""
    tokens = b * x.completion if x.device == "cuda" else b * seq  # CUDA scores only the completion tokens
    tile = min(tokens, 4096) * 32768 * x.activation_bytes  # allocated at the full chunk width, whatever the vocabulary
    saved = lm_head_saved(x, b * seq)
    per_token_stats = 6 * tokens * 4  # log-sum-exp, target logit, entropy sums (fp32)
    if not backward:
        return tile + per_token_stats
    lm_head_trains = not x.lora_params
    return saved + tile + per_token_stats + tokens * x.hidden * 4 + (x.vocab * x.hidden * 4 if lm_head_trains else 0.0)


def train_phase_parts(x: Inputs) -> dict[str, float]:
    """The uncalibrated train-phase peak split into GROUPS, plus 'other' (a colocated
    vLLM engine's resident share), in bytes: what calibration fits factors against."""
    e = estimate_train(replace(x, calibration=()))
    c = e.components
    scale = 1 + allocator_fraction(x)  # the reserve is a fraction of the train phase's tensors
    held = [k for k in GROUPS["states"] if k not in ("zero3_gather", "runtime")]  # the gather is generate()'s
    parts = {
        "states": scale * sum(c[k] for k in held) + c["runtime"],
        "activations": scale * c["activations"],
        "logits": scale * c["logits"],
    }
    parts["other"] = e.phases["train"] - sum(parts.values())
    return parts


def estimate_train(x: Inputs) -> RoleEstimate:
    """A training GPU (on CPU, a training process): its components and each phase of a GRPO step as it is from
    step 2 on, when the optimizer's states exist (step 1's phases are the same less them, so never larger).
    Every phase is the tensors it holds (`phase_tensors`) plus the process's `runtime` and one
    `allocator_reserve`: the caching allocator keeps the largest phase's blocks for the rest of the run."""
    c = {
        **model_states(x),
        **_backward_terms(x),
        **_generation_terms(x),
        **_vllm_terms(x),
        "runtime": runtime_bytes(x),
    }
    for name, factor in x.calibration:  # preflight.calibration: factors fitted on measured runs
        for component in GROUPS.get(name, ()):  # the engine's factor is vllm_engine.py's
            c[component] *= factor
    tensors = phase_tensors(x, c)
    c["allocator_reserve"] = allocator_fraction(x) * max(tensors.values())
    vllm_share = {phase: c["vllm_colocated"] if phase == "generate" else c["vllm_resident"] for phase in tensors}
    phases = {k: v + c["runtime"] + c["allocator_reserve"] + vllm_share[k] for k, v in tensors.items()}
    del c["vllm_resident"], c["scoring_logits"]  # in the phases, not components of their own
    return RoleEstimate(c, phases, x.capacity)


def runtime_bytes(x: Inputs) -> float:
    """What a process holds besides its tensors: on a GPU the CUDA context, the kernels and workspaces a step loads
    (as measured on the plan's card where preflight.calibration has it) and NCCL's and DeepSpeed's share
    (cuda_runtime.py); on CPU Python and the libraries' resident pages."""
    if x.device == "cuda":
        card = x.card_runtime if x.card_runtime is not None else cuda_runtime.card_part(x.card, x.cuda_lazy)
        return card + process_group_bytes(x)
    return CPU_RUNTIME_UNDER_LIMIT if x.address_space_limited else CPU_RUNTIME


def process_group_bytes(x: Inputs) -> float:
    """A GPU process's share of its process group on NCCL (cuda_runtime.process_group_part); 0 without one."""
    nccl = x.world_size > 1 or x.zero_stage > 0 or x.fsdp
    return cuda_runtime.process_group_part(x.world_size, nccl, x.zero_stage > 0, x.card)


def allocator_fraction(x: Inputs) -> float:
    """The caching allocator's reserve over the tensors alive at the peak (docs/memory-planner.md)."""
    return CUDA_ALLOCATOR_RESERVE if x.device == "cuda" else FRAGMENTATION


def _backward_terms(x: Inputs) -> dict[str, float]:
    """What the training forward and backward hold besides the model states: the reference model, ZeRO-1's
    full gradients, the layers' saved activations, the fused LM head, autocast's 16-bit weight copies,
    DeepSpeed's and FSDP2's buffers, a quantized layer's dequantized copy."""
    wb, b, seq = x.dtype_bytes, x.batch, x.prompt + x.completion
    # ZeRO-3 partitions the reference model, FSDP2 shards it (trl prepare_deepspeed / prepare_fsdp)
    ref_share = x.world_size if x.zero_stage == 3 else x.fsdp_shard if x.fsdp else 1
    trainable_bytes = (x.lora_params * 4) if x.lora_params else x.params * wb
    every_layer, largest_layer = activations.layers_saved(x, b * seq)
    if x.checkpointing:  # layer inputs kept (the residual stream's dtype), one layer alive while it is recomputed
        saved = x.layers * b * seq * x.hidden * (4 if x.autocast else wb) + largest_layer
    else:
        saved = every_layer
    # A quantized layer runs on a dequantized copy of its weight, one layer at a time (forward and backward).
    largest_linear = max(x.hidden * x.intermediate, x.hidden * x.q_dim)
    return {
        "vision_activations": _vision_activations(x),
        "reference_model": x.params * wb / ref_share if x.ref_model else 0.0,
        "zero1_full_gradients": trainable_bytes * (1 - 1 / x.world_size) if x.zero_stage == 1 else 0.0,
        "activations": saved,
        "logits": _fused_head(x, b, seq, backward=True),
        "scoring_logits": _fused_head(x, b, seq, backward=False),  # no-grad log-probs of b sequences
        # bf16 autocast over fp32 weights keeps a 16-bit copy of every decoder layer's weights for
        # backward (measured; not the embedding or the fused LM head); checkpointing: one layer's
        "autocast_weights": 2 * buffers.layer_params(x) * (1 if x.checkpointing else x.layers) if x.autocast else 0.0,
        "deepspeed_buffers": buffers.deepspeed_buffers(x, wb),
        "fsdp_buffers": buffers.fsdp_buffers(x),
        "fsdp_full_tensor": buffers.fsdp_full_tensor(x),
        "dequantized_weights": largest_linear * x.compute_bytes if x.quantized_params else 0.0,
    }


def _vision_activations(x: Inputs) -> float:
    """A trained vision tower's saved activations for this micro-batch's images (vision.py): every completion
    carries its prompt's images. A frozen tower (LoRA on the language model) keeps none."""
    if x.vision is None or not x.vision_patches or x.lora_params:
        return 0.0
    return vision.activations(x.vision, x.batch * x.vision_patches, x.activation_bytes, x.checkpointing)


def _generation_terms(x: Inputs) -> dict[str, float]:
    """What generate() holds without vLLM (the KV cache of this rank's share of a generation batch), and what
    ZeRO-3 gathers: the whole model to generate with, or to merge LoRA before a weight sync, else its largest
    layer (DeepSpeed's estimator)."""
    seq = x.prompt + x.completion
    kv_cache = families.hf_cache_bytes(x, seq, x.batch * x.steps_per_generation)
    generates_gathered = x.vllm_mode == "off" and x.ds3_gather_for_generation
    merges_adapters = x.vllm_mode != "off" and x.lora_params  # the weight sync gathers all to merge LoRA
    gather: float
    if x.zero_stage == 3 and (generates_gathered or merges_adapters):
        gather = x.params * x.dtype_bytes
    elif x.zero_stage == 3:  # the largest module: the embedding in fp32, or a MoE layer's experts
        gather = max(4 * x.vocab * x.hidden, families.largest_expert_gather(x))
    else:
        gather = 0.0
    return {"kv_cache": kv_cache if x.vllm_mode == "off" else 0.0, "zero3_gather": gather}


def _vllm_terms(x: Inputs) -> dict[str, float]:
    """vLLM beside the trainer: a colocated engine on this GPU (awake while it generates, its sleeping residue
    or all of it otherwise); for vllm=server, rank 0's NCCL buffers to the server, or (filesystem) its host
    copy of the whole model while it writes it: this process's memory on a CPU rank, host RAM beside a GPU."""
    awake = resident = 0.0
    if x.vllm_mode == "colocate":
        engine = vllm_engine.estimate(x, server=False)
        awake = engine.peak
        resident = vllm_engine.residual_asleep(engine) if x.vllm_sleep else awake
    server = x.vllm_mode == "server"
    return {
        "vllm_colocated": awake,
        "vllm_resident": resident,
        "weight_sync_buffers": vllm_engine.WEIGHT_SYNC_BUFFERS if server and x.weight_sync == "nccl" else 0.0,
        "weight_sync_copy": sync_copy_bytes(x)
        if server and x.weight_sync == "filesystem" and x.device == "cpu"
        else 0.0,
    }


def phase_tensors(x: Inputs, c: dict[str, float]) -> dict[str, float]:
    """The tensors each phase holds from step 2 on, in the order a step runs them. Between steps the weights,
    the optimizer's states and the reference model stay (`resident`); gradients live from backward to the
    optimizer step (zero_grad frees them), and with gradient accumulation until the next generation (measured
    on the H200: generate at 16 x 4 held them). DeepSpeed steps inside backward (accelerate's backward calls
    engine.step), so its step's gradients and copies are in the train phase and its optimizer phase holds the
    resident states only."""
    resident = c["weights"] + c["optimizer"] + c["reference_model"]
    gradients = c["gradients"] + c["zero1_full_gradients"]
    backward = (
        c["activations"]
        + c["vision_activations"]
        + c["autocast_weights"]
        + c["logits"]
        + gradients
        + c["deepspeed_buffers"]
        + c["fsdp_buffers"]
        + c["fsdp_full_tensor"]
        + c["dequantized_weights"]
    )
    allgather = min(x.allgather_bucket, x.lora_params or x.params) * x.dtype_bytes if x.zero_stage in (1, 2) else 0.0
    step = c["gradients"] + c["fp32_gradients"] + allgather
    # FSDP2 without vLLM generates through the sharded model (its layers gathered as they run); with vLLM the
    # weight sync gathers one parameter at a time
    fsdp_generate = c["fsdp_buffers"] if x.vllm_mode == "off" else c["fsdp_full_tensor"]
    generating = c["kv_cache"] + c["zero3_gather"] + c["dequantized_weights"] + fsdp_generate
    held_gradients = c["gradients"] if x.gradient_accumulation > 1 else 0.0
    phases = {
        "generate": resident + max(generating, held_gradients),
        "score": resident + c["scoring_logits"] + c["dequantized_weights"] + c["fsdp_buffers"] + c["fsdp_full_tensor"],
        "train": resident + (max(backward, step) if x.zero_stage else backward),
        "optimizer": resident + (0.0 if x.zero_stage else step),
        # the reward functions (and an agentic run's tools) run in Python between the GPU's phases
        "reward": resident + c["dequantized_weights"],
    }
    if x.agentic:
        phases["tools"] = phases["reward"]
    if not x.scores:
        del phases["score"]
    if x.vllm_mode == "server":  # before each generation, after the optimizer step: what the sync holds on rank 0
        sync = c["weight_sync_buffers"] + c["weight_sync_copy"]
        phases["weight_sync"] = resident + c["zero3_gather"] + c["fsdp_full_tensor"] + sync
    return {phase: phases[phase] for phase in PHASES if phase in phases}


def sync_copy_bytes(x: Inputs) -> float:
    """vllm.weight_sync=filesystem: rank 0's copy of the whole policy (LoRA merged) in model.dtype, written as
    safetensors (training/weight_sync.py): the bytes each sync writes and the server reads."""
    return x.params * x.dtype_bytes


def estimate_vllm_engine(x: Inputs) -> RoleEstimate:
    """A `vllm serve` GPU (vllm_engine.py's rules) as a role of the plan: one phase, generate; an engine that
    cannot start is as fatal as an OOM, so it is reported over capacity: at what starting needs where that is
    over the GPU (weights too large for it), else just over (vLLM refuses within its gpu_memory_utilization)."""
    engine = vllm_engine.estimate(x, server=True)
    peak = engine.peak if engine.starts else max(engine.peak, engine.needs, x.capacity + 1)
    return RoleEstimate(engine.components, {"generate": peak}, x.capacity, engine.notes)


@dataclass
class Estimate:
    train: RoleEstimate
    vllm: RoleEstimate | None

    @property
    def fits(self) -> bool:
        return self.train.fits and (self.vllm is None or self.vllm.fits)


def estimate(x: Inputs) -> Estimate:
    train = estimate_train(x)
    if x.vllm_mode == "colocate":
        _admit_colocated(x, train)
    return Estimate(train, estimate_vllm_engine(x) if x.vllm_mode == "server" else None)


def resident_at_engine_start(x: Inputs, train: RoleEstimate) -> float:
    """What the training process holds when TRL starts the colocated engine: its weights, the reference model
    and the CUDA context (gradients and optimizer states come at the first step)."""
    c = train.components
    return c["weights"] + c["reference_model"] + c["runtime"]


def _admit_colocated(x: Inputs, train: RoleEstimate) -> None:
    """vLLM starts only with budget = gpu_memory_utilization x total free (its init_device check: "Free memory
    on device ... is less than desired GPU memory utilization"), and only with a KV cache that holds one
    max_model_len sequence. A colocated engine that cannot start is an OOM verdict, with its reason."""
    engine = vllm_engine.estimate(x, server=False)
    free = x.capacity - resident_at_engine_start(x, train)
    if free < engine.budget and x.device == "cuda":  # vLLM's init_device check is a GPU's
        largest = int(100 * free / x.capacity) / 100 - 0.01
        train.notes.append(
            f"vLLM cannot start: the trainer holds {(x.capacity - free) / GIB:.2f} GiB when the engine starts "
            f"(weights, reference model, CUDA context), leaving {free / GIB:.2f} GiB free, below "
            f"gpu_memory_utilization x capacity = {engine.budget / GIB:.2f} GiB"
            + (f"; vllm.gpu_memory_utilization <= {largest:.2f} starts" if largest > 0 else "")
        )
    elif not engine.starts:
        train.notes += [f"vLLM cannot start: {n}" for n in engine.notes[:1]]
    else:
        train.notes += [f"colocated vLLM {n}" for n in engine.notes]
        return
    # over capacity: at what starting needs (the engine at its least instead of its budget) where that is over the
    # GPU, else just over (vLLM refuses within its gpu_memory_utilization)
    needs = train.phases["generate"] - engine.peak + engine.needs
    train.phases["generate"] = max(train.phases["generate"], needs, x.capacity + 1)
