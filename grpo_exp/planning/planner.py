"""Per-GPU peak memory of a GRPO run, predicted before launch. Pure Python: no torch import.

`inputs(cfg, plan)` reads the numbers once; `estimate(inputs)` is arithmetic, so `suggest` can
re-plan dozens of variants (smaller batch, checkpointing, ZeRO-3, ...) in milliseconds.
Formulas, sources and known limits: docs/memory-planner.md. All sizes are bytes until reported
in GiB (2**30).
"""

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import DECODER_LINEAR_LAYERS, GIB

# The planner's components in the groups a calibration file corrects (planning/calibration.py fits a
# factor per group from measured runs; preflight.calibration applies them here).
GROUPS = {
    "states": (
        "weights",
        "gradients",
        "optimizer",
        "reference_model",
        "zero1_full_gradients",
        "zero3_gather",
        "runtime",
        "autocast_weights",
        "deepspeed_buffers",
        "dequantized_weights",
    ),
    "activations": ("activations",),
    "logits": ("logits",),
}


def load(path: str | Path) -> dict:
    """A calibration file (python -m grpo_exp.calibrate): its factors, the device and stat they came from."""
    data = json.loads(Path(path).expanduser().read_text())
    if not isinstance(data.get("factors"), dict):
        raise ValueError(f"{path} holds no 'factors' (write it with python -m grpo_exp.calibrate)")
    return data


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}
CUDA_CONTEXT = 0.75 * GIB  # per process: CUDA context + cuBLAS workspace (0.5-1.5 GiB measured)
CPU_RUNTIME = 0.5 * GIB  # per CPU process: Python + torch + transformers + trl resident (measured here: ~0.5 GiB)
# Under memory.limit_gib a CPU rank is capped by RLIMIT_DATA, which counts address space, not RSS:
# an idle worker (torch, transformers, trl imported) already holds 1.5 GiB of it (VmData, measured
# here), and tensors count from allocation, touched or not.
CPU_RUNTIME_UNDER_LIMIT = 1.5 * GIB
FRAGMENTATION = 0.05  # allocator reserve on top of live tensors (expandable_segments keeps it low)
# Saved-for-backward bytes per token of one decoder layer, as coefficients of (hidden, q_dim =
# heads x head_dim, kv_dim, intermediate, q_dim + kv_dim when q/k are RMS-normed as in Qwen3), for
# fp32 weights, fp32 weights under bf16 autocast, and bf16 weights. Least squares over Qwen2.5-0.5B,
# 1.5B, 7B, Qwen3-0.6B, 1.7B, 4B and Llama-3.1-8B widths: every one within 0.3%. Structurally: four
# copies of the MLP's intermediate, about six of the hidden state (norms in fp32, residual), two of
# q and of k/v (rotary, attention in and out); flash/memory-efficient attention keeps no s x s.
ACTIVATION_BYTES_PER_TOKEN = {
    "fp32": (23.5, 7.89, 9.45, 16.15, 8.02),
    "autocast": (25.5, 3.89, 5.45, 8.15, 6.02),
    "bf16": (15.75, 3.96, 4.73, 8.08, 6.02),
}
QK_NORM_MODELS = ("qwen3", "qwen3_moe")  # q_norm / k_norm in every attention layer
# The LM head's tensors saved for backward, bytes per token per hidden unit, by the weights' bytes:
# the final hidden state and its norm's input and output (fp32 weights: three fp32 copies).
HEAD_SAVED_BYTES_PER_HIDDEN = {4: 12, 2: 8}
VLLM_NON_TORCH = 1.3 * GIB  # NCCL, CUDA context of the engine (vLLM's own startup log, PR #11743)
VLLM_CUDA_GRAPHS = 1.0 * GIB  # captured graphs, outside gpu_memory_utilization (0.4-3.3 GiB seen)
VLLM_PROFILE_TOKENS = 8192  # vLLM's max_num_batched_tokens default for the server


@dataclass(frozen=True)
class Inputs:
    # model
    params: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int
    # run
    world_size: int
    capacity: float  # bytes per GPU
    batch: int  # per_device_train_batch_size
    steps_per_generation: int
    completion: int  # max_completion_length
    prompt: int  # max prompt tokens
    checkpointing: bool
    ref_model: bool  # beta > 0 without LoRA
    zero_stage: int  # 0 = no DeepSpeed
    offload_optimizer: bool
    offload_params: bool
    lora_params: int  # 0 = full fine-tuning
    vllm_mode: str
    vllm_util: float
    vllm_tp: int
    vllm_max_len: int
    vllm_sleep: bool
    ds3_gather_for_generation: bool
    sub_group_size: float = 1e9  # ZeRO-3 zero_optimization.sub_group_size (DeepSpeed's default)
    device: str = "cuda"
    autocast: bool = False  # 16-bit autocast over float32 weights (GRPOConfig bf16/fp16 with model.dtype float32)
    qk_norm: bool = False  # RMSNorm on q and k (Qwen3): more saved activations
    address_space_limited: bool = False  # a CPU rank under memory.limit_gib (RLIMIT_DATA)
    # DeepSpeed's buffers, in elements (zero_optimization; "auto" as the HF integration fills it)
    reduce_bucket: float = 5e8
    allgather_bucket: float = 5e8
    overlap_comm: bool = False
    zero3_max_live: float = 1e9  # stage3_max_live_parameters
    zero3_prefetch: float = 5e7  # stage3_prefetch_bucket_size
    calibration: tuple = ()  # (group, factor) pairs from preflight.calibration (calibration.py)
    # model.quantization: bytes per weight of the quantized linear layers (constants included; 0 = not
    # quantized), how many weights that covers, the dtype each layer is dequantized to while it runs,
    # and whether the checkpoint itself is quantized (vLLM then serves it at those bits too).
    quant_bytes: float = 0.0
    quantized_params: int = 0
    compute_bytes: int = 2
    prequantized: bool = False

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def activation_bytes(self) -> int:
        """Bytes per element of what layers compute: 16-bit under autocast or with 16-bit weights."""
        return 2 if self.autocast else self.dtype_bytes


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


def quantized_bytes_per_weight(q) -> float:
    """Bytes per weight of a quantized linear layer, its quantization constants included: bitsandbytes
    nf4/fp4 keeps an fp32 absmax per 64-weight block (0.0625 B), double quantization an 8-bit one plus
    an fp32 per 256 blocks (0.0159 B); LLM.int8 an fp32 scale per row; GPTQ/AWQ-style checkpoints an
    fp16 scale and a packed zero point per group of 128 (0.02 B)."""
    if q.method == "bitsandbytes" and q.bits == 4:
        return 0.5 + (1 / 64 + 4 / (64 * 256) if q.double_quant else 4 / 64)
    if q.method in ("bitsandbytes", "fp8") or q.bits == 8:
        return q.bits / 8 + (0.0 if q.method == "fp8" else 4 / 4096)
    return q.bits / 8 + 2.5 / 128


def lora_params(
    hidden: int, q_dim: int, kv_dim: int, intermediate: int, layers: int, vocab: int, r: int, targets
) -> int:
    """Adapter parameters: r x (in + out) for every targeted layer (an embedding's in is the vocabulary)."""
    shapes = {
        "q_proj": (hidden, q_dim),
        "k_proj": (hidden, kv_dim),
        "v_proj": (hidden, kv_dim),
        "o_proj": (q_dim, hidden),
        "gate_proj": (hidden, intermediate),
        "up_proj": (hidden, intermediate),
        "down_proj": (intermediate, hidden),
    }
    per_layer = sum(r * sum(shapes[t]) for t in targets if t in shapes)
    once = r * (hidden + vocab) * sum(t in targets for t in ("lm_head", "embed_tokens"))  # not per layer
    return per_layer * layers + once


def lora_trainable(cfg: DictConfig) -> int:
    if not cfg.peft.enabled:
        return 0
    m = cfg.model
    return lora_params(
        m.hidden_size,
        m.num_attention_heads * m.head_dim,
        m.num_key_value_heads * m.head_dim,
        m.intermediate_size,
        m.num_hidden_layers,
        m.vocab_size,
        cfg.peft.r,
        cfg.peft.target_modules,
    )


def activation_checkpointing(trainer: DictConfig) -> bool:
    """Whether layers recompute their activations: transformers 5 reads `activation_checkpointing`
    and falls back to its deprecated alias `gradient_checkpointing` (TRL's default: true) when unset."""
    if trainer.activation_checkpointing is not None:
        return bool(trainer.activation_checkpointing)
    return bool(trainer.gradient_checkpointing)


def capacity_bytes(cfg: DictConfig, plan) -> float:
    """A GPU's memory (on CPU runs, this machine's RAM shared by its training processes), or the
    memory.limit_gib cap when that is smaller."""
    if plan.device == "cuda":
        capacity = cfg.topology.gpu_memory_gib * GIB
    else:
        import psutil

        capacity = psutil.virtual_memory().total / max(1, plan.nodes[0].train_procs)
    limit = cfg.memory.limit_gib
    return min(capacity, limit * GIB) if limit else capacity


def inputs(cfg: DictConfig, plan) -> Inputs:
    m, t, v, ds = cfg.model, cfg.trainer, cfg.vllm, cfg.deepspeed
    zero = ds.get("zero_optimization", {}) if ds else {}
    prompt = cfg.data.max_prompt_length or 512  # unbounded prompts: assume 512 tokens (a note says so)
    return Inputs(
        params=m.num_parameters,
        hidden=m.hidden_size,
        intermediate=m.intermediate_size,
        layers=m.num_hidden_layers,
        heads=m.num_attention_heads,
        kv_heads=m.num_key_value_heads,
        head_dim=m.head_dim,
        vocab=m.vocab_size,
        dtype_bytes=DTYPE_BYTES[m.dtype],
        world_size=plan.world_size,
        capacity=capacity_bytes(cfg, plan),
        device=plan.device,
        batch=t.per_device_train_batch_size,
        steps_per_generation=t.steps_per_generation or t.gradient_accumulation_steps,
        completion=t.max_completion_length,
        prompt=prompt,
        checkpointing=activation_checkpointing(t),
        ref_model=t.beta > 0 and not cfg.peft.enabled,
        zero_stage=int(zero.get("stage", 0)) if ds else 0,
        offload_optimizer=bool(zero.get("offload_optimizer")),
        offload_params=bool(zero.get("offload_param")),
        lora_params=lora_trainable(cfg),
        vllm_mode=v.mode,
        vllm_util=v.gpu_memory_utilization,
        vllm_tp=v.tensor_parallel_size,
        vllm_max_len=v.max_model_length or m.max_position_embeddings,
        vllm_sleep=v.enable_sleep_mode,
        ds3_gather_for_generation=t.ds3_gather_for_generation,
        sub_group_size=float(zero.get("sub_group_size", 1e9)) if ds else 1e9,
        autocast=DTYPE_BYTES[m.dtype] == 4 and bool(t.bf16 or t.fp16),
        qk_norm=m.model_type in QK_NORM_MODELS,
        address_space_limited=plan.device == "cpu" and cfg.memory.limit_gib is not None,
        reduce_bucket=_elements(zero.get("reduce_bucket_size"), m.hidden_size**2),
        allgather_bucket=_elements(zero.get("allgather_bucket_size"), 5e8),
        overlap_comm=bool(zero.get("overlap_comm", False)),
        zero3_max_live=_elements(zero.get("stage3_max_live_parameters"), 1e9),
        zero3_prefetch=_elements(zero.get("stage3_prefetch_bucket_size"), 0.9 * m.hidden_size**2),
        calibration=_calibration(cfg, plan.device),
        **_quantization(cfg),
    )


def _quantization(cfg: DictConfig) -> dict:
    """The Inputs fields of model.quantization. Quantized: every decoder linear layer (attention and
    MLP projections); embeddings, norms, lm_head and a vision tower stay in model.dtype (bitsandbytes
    skips the output layer; the vision tower is planned unquantized, the conservative side)."""
    q, m = cfg.model.get("quantization"), cfg.model
    if q is None:
        return {}
    q_dim, kv_dim = m.num_attention_heads * m.head_dim, m.num_key_value_heads * m.head_dim
    linear = m.num_hidden_layers * (
        2 * m.hidden_size * q_dim + 2 * m.hidden_size * kv_dim + 3 * m.hidden_size * m.intermediate_size
    )
    compute = m.dtype if q.compute_dtype == "auto" else q.compute_dtype
    return {
        "quant_bytes": quantized_bytes_per_weight(q),
        "quantized_params": min(linear, m.num_parameters),
        "compute_bytes": DTYPE_BYTES[compute],
        "prequantized": bool(q.prequantized),
    }


def _elements(value, auto: float) -> float:
    """A DeepSpeed size in elements: "auto" is what transformers' integration fills in (hidden^2 for
    reduce_bucket_size, 0.9 hidden^2 for stage3_prefetch_bucket_size); unset is DeepSpeed's default."""
    return auto if value is None or value == "auto" else float(value)


def _calibration(cfg: DictConfig, device: str) -> tuple:
    """preflight.calibration's factors as (group, factor) pairs, when they were fitted on this kind
    of device (a CPU calibration says nothing about a GPU)."""
    path = cfg.preflight.get("calibration")
    if not path:
        return ()
    data = load(path)
    return tuple(sorted(data["factors"].items())) if data.get("device") == device else ()


def model_states(x: Inputs) -> dict[str, float]:
    """Parameters, gradients and optimizer states on one training rank (DeepSpeed's estimator
    formulas for ZeRO-1/2/3, PyTorch AdamW otherwise). Adapters train in fp32 (PEFT's default)."""
    n, wb = x.world_size, x.dtype_bytes
    trainable = x.lora_params or x.params
    tb = 4 if x.lora_params else wb  # bytes per trainable parameter (PEFT upcasts adapters)
    frozen = base_weight_bytes(x) / wb if x.lora_params else 0  # in model.dtype units, quantized layers at their bytes
    if x.zero_stage == 0:
        return {
            "weights": frozen * wb + trainable * tb,
            "gradients": trainable * tb,
            "optimizer": 2 * trainable * tb,  # AdamW exp_avg + exp_avg_sq, in the parameters' dtype
        }

    def shard(b):
        return b / n

    weights = (frozen * wb + trainable * tb) if x.zero_stage < 3 else shard(frozen * wb + trainable * tb)
    # DeepSpeed keeps an fp32 master partition and fp32 Adam moments, and reduces gradients into
    # partitions (16-bit, plus an fp32 copy when training in 16 bit). These are the gradients held
    # at the optimizer step; ZeRO-1's full gradients during backward are `zero1_full_gradients`.
    grads16 = shard(trainable * tb)
    fp32_grads = 0 if tb == 4 else shard(trainable * 4)
    if x.zero_stage == 3 and tb != 4:
        # Stage 3 builds the fp32 gradients one sub-group at a time and frees each after its step
        # (deepspeed/runtime/zero/stage3.py), so at most sub_group_size of them live at once.
        fp32_grads = 4 * min(trainable / n, x.sub_group_size)
    optimizer = shard(trainable * 4) + shard(trainable * 8)  # master copy + Adam moments
    if x.offload_optimizer:
        optimizer, fp32_grads = 0.0, 0.0
    if x.offload_params and x.zero_stage == 3:
        weights = 0.0
    return {"weights": weights, "gradients": grads16 + fp32_grads, "optimizer": optimizer}


def base_weight_bytes(x: Inputs) -> float:
    """The base model's weights: quantized linear layers at their bytes per weight, the rest in model.dtype."""
    return x.quantized_params * x.quant_bytes + (x.params - x.quantized_params) * x.dtype_bytes


def _activations_per_layer(x: Inputs, tokens: int) -> float:
    """Bytes one Llama/Qwen decoder layer saves for backward, fitted to the exact saved-tensor bytes
    of a GRPO training forward on 7 architectures (training/saved_bytes.py; docs/memory-planner.md).
    Padded batches (GRPO's always are) make transformers repeat the GQA keys and values to every
    head: 2 (q_dim - kv_dim) more elements per token."""
    regime = "bf16" if x.dtype_bytes == 2 else ("autocast" if x.autocast else "fp32")
    c_h, c_q, c_kv, c_f, c_qk = ACTIVATION_BYTES_PER_TOKEN[regime]
    per_token = (
        c_h * x.hidden
        + c_q * x.q_dim
        + c_kv * x.kv_dim
        + c_f * x.intermediate
        + (c_qk * (x.q_dim + x.kv_dim) if x.qk_norm else 0.0)
    )
    return tokens * (per_token + 2 * (x.q_dim - x.kv_dim) * x.activation_bytes)


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


def _layer_params(x: Inputs) -> int:
    """Weights of one decoder layer: q and o, k and v, the MLP's gate, up and down projections."""
    return 2 * x.hidden * x.q_dim + 2 * x.hidden * x.kv_dim + 3 * x.hidden * x.intermediate


def _deepspeed_buffers(x: Inputs, wb: int) -> float:
    """What DeepSpeed holds besides the model states during backward: ZeRO-1/2's gradient reduce
    bucket (overlap_comm keeps a second one in flight), ZeRO-3's parameters gathered on the fly -
    the module running, the prefetch bucket, at most stage3_max_live_parameters - and its bucket."""
    if x.zero_stage in (1, 2):
        return x.reduce_bucket * wb * (2 if x.overlap_comm else 1)
    if x.zero_stage == 3 and not x.offload_params:
        largest = max(_layer_params(x), x.vocab * x.hidden)  # a decoder layer or the embedding / LM head
        live = min(x.zero3_max_live, largest + x.zero3_prefetch)
        return live * wb + x.reduce_bucket * wb
    return 0.0


def train_phase_parts(x: Inputs) -> dict[str, float]:
    """The uncalibrated train-phase peak split into GROUPS, plus 'other' (a colocated
    vLLM engine's resident share), in bytes: what calibration fits factors against."""
    e = estimate_train(replace(x, calibration=()))
    c = e.components
    scale = 1 + FRAGMENTATION
    parts = {
        # the states group as the train phase holds it: every component of GROUPS["states"] but the
        # whole-model gather, which only generate() does
        "states": scale * sum(c[k] for k in GROUPS["states"] if k != "zero3_gather"),
        "activations": scale * c["activations"],
        "logits": scale * c["logits"],
    }
    parts["other"] = e.phases["train"] - sum(parts.values())
    return parts


def estimate_train(x: Inputs) -> RoleEstimate:
    c = model_states(x)
    wb = x.dtype_bytes
    seq = x.prompt + x.completion
    b = x.batch
    c["reference_model"] = (x.params * wb / (x.world_size if x.zero_stage == 3 else 1)) if x.ref_model else 0.0
    trainable_bytes = (x.lora_params * 4) if x.lora_params else x.params * wb
    c["zero1_full_gradients"] = trainable_bytes * (1 - 1 / x.world_size) if x.zero_stage == 1 else 0.0
    per_layer = _activations_per_layer(x, b * seq)
    if x.checkpointing:  # layer inputs kept (the residual stream's dtype), one layer alive while it is recomputed
        c["activations"] = x.layers * b * seq * x.hidden * (4 if x.autocast else wb) + per_layer
    else:
        c["activations"] = x.layers * per_layer
    c["logits"] = _fused_head(x, b, seq, backward=True)
    scoring_logits = _fused_head(x, b, seq, backward=False)  # no-grad log-probs of b sequences
    # bf16 autocast over fp32 weights keeps a 16-bit copy of every decoder layer's weights for
    # backward (measured; not the embedding or the fused LM head); checkpointing: one layer's
    c["autocast_weights"] = 2 * _layer_params(x) * (1 if x.checkpointing else x.layers) if x.autocast else 0.0
    c["deepspeed_buffers"] = _deepspeed_buffers(x, wb)
    # A quantized layer runs on a dequantized copy of its weight, one layer at a time (forward and backward).
    largest_linear = max(x.hidden * x.intermediate, x.hidden * x.q_dim)
    c["dequantized_weights"] = largest_linear * x.compute_bytes if x.quantized_params else 0.0
    generation_seqs = b * x.steps_per_generation  # this rank's share of the generation batch
    if x.vllm_mode == "off":
        c["kv_cache"] = 2 * x.layers * x.kv_dim * wb * seq * generation_seqs
    else:
        c["kv_cache"] = 0.0
    if x.zero_stage == 3 and x.vllm_mode == "off" and x.ds3_gather_for_generation:
        c["zero3_gather"] = x.params * wb  # the whole model gathered for generate()
    elif x.zero_stage == 3 and x.vllm_mode != "off" and x.lora_params:
        c["zero3_gather"] = x.params * wb  # weight sync gathers the whole model to merge the adapters
    elif x.zero_stage == 3:
        c["zero3_gather"] = 4 * x.vocab * x.hidden  # largest layer gathered (DeepSpeed's estimator)
    else:
        c["zero3_gather"] = 0.0
    vllm_awake = vllm_resident = 0.0
    if x.vllm_mode == "colocate":
        vllm_awake = x.vllm_util * x.capacity + VLLM_CUDA_GRAPHS
        vllm_resident = VLLM_CUDA_GRAPHS if x.vllm_sleep else vllm_awake
    c["vllm_colocated"] = vllm_awake
    c["runtime"] = (
        CUDA_CONTEXT if x.device == "cuda" else (CPU_RUNTIME_UNDER_LIMIT if x.address_space_limited else CPU_RUNTIME)
    )

    for name, factor in x.calibration:  # preflight.calibration: factors fitted on measured runs
        for component in GROUPS[name]:
            c[component] *= factor
    persistent = c["weights"] + c["optimizer"] + c["reference_model"] + c["runtime"]
    phases = {
        "generate": persistent + vllm_awake + c["kv_cache"] + c["zero3_gather"] + c["dequantized_weights"],
        "score": persistent + vllm_resident + scoring_logits + c["dequantized_weights"],
        "train": persistent
        + vllm_resident
        + c["activations"]
        + c["autocast_weights"]
        + c["logits"]
        + c["gradients"]
        + c["zero1_full_gradients"]
        + c["deepspeed_buffers"]
        + c["dequantized_weights"],
        "optimizer": persistent
        + vllm_resident
        + c["gradients"]
        + (x.allgather_bucket * wb if x.zero_stage in (1, 2) else 0.0),
    }
    torch_part = {k: v - vllm_awake if k == "generate" else v - vllm_resident for k, v in phases.items()}
    phases = {k: v + FRAGMENTATION * torch_part[k] for k, v in phases.items()}
    c["allocator_reserve"] = FRAGMENTATION * max(torch_part.values())
    return RoleEstimate(c, phases, x.capacity)


def kv_bytes_per_token(x: Inputs) -> float:
    return 2 * x.layers * (x.kv_heads / x.vllm_tp) * x.head_dim * 2  # bf16 K and V, per TP shard


def estimate_vllm_engine(x: Inputs) -> RoleEstimate:
    """One vLLM engine GPU: weights per TP shard, profile activations, non-torch memory, the KV
    cache as what remains of gpu_memory_utilization x capacity, CUDA graphs on top."""
    budget = x.vllm_util * x.capacity
    c = {
        # a pre-quantized checkpoint is served at its own bits; anything else in 16 bits
        "weights": (base_weight_bytes(replace(x, dtype_bytes=2)) if x.prequantized else x.params * 2) / x.vllm_tp,
        "profile_activations": VLLM_PROFILE_TOKENS * (2 * x.hidden + 2 * x.intermediate / x.vllm_tp) * 2
        + 256 * x.vocab * 4,
        "non_torch": VLLM_NON_TORCH,
    }
    c["kv_cache"] = max(0.0, budget - sum(c.values()))
    c["cuda_graphs"] = VLLM_CUDA_GRAPHS
    notes = []
    per_token = kv_bytes_per_token(x)
    if c["kv_cache"] <= 0:
        notes.append("no memory left for the KV cache within gpu_memory_utilization")
    elif x.vllm_max_len * per_token > c["kv_cache"]:
        notes.append(
            f"max_model_length {x.vllm_max_len} needs {x.vllm_max_len * per_token / GIB:.2f} GiB of KV cache; only "
            f"{c['kv_cache'] / GIB:.2f} GiB is left"
        )
    else:
        concurrency = c["kv_cache"] / (per_token * (x.prompt + x.completion))
        notes.append(
            f"KV cache holds {c['kv_cache'] / per_token:,.0f} tokens: ~{concurrency:.0f} sequences of "
            "prompt+completion at once"
        )
    peak = budget + c["cuda_graphs"]
    engine_ok = c["kv_cache"] > 0 and x.vllm_max_len * per_token <= c["kv_cache"]
    # An engine that cannot start is as fatal as an OOM: report it as over capacity.
    return RoleEstimate(c, {"generate": peak if engine_ok else max(peak, x.capacity + 1)}, x.capacity, notes)


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
        engine = estimate_vllm_engine(x)
        if not engine.phases["generate"] <= x.capacity:  # the colocated engine cannot start
            train.phases["generate"] = max(train.phases["generate"], x.capacity + 1)
            train.notes += engine.notes
    return Estimate(train, estimate_vllm_engine(x) if x.vllm_mode == "server" else None)


# --- what to change when it does not fit ------------------------------------------------------


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
    roles = [("train", base.train, changed.train)] + ([("vllm", base.vllm, changed.vllm)] if base.vllm else [])
    binding = [(b, c) for _, b, c in roles if not b.fits] or [(b, c) for _, b, c in roles]
    return max(b.peak - c.peak for b, c in binding)


def suggest(x: Inputs) -> list[dict]:
    """Changes that would make the run fit (or help), ranked: fitting first, then by GiB saved."""
    base = estimate(x)
    if base.fits:
        return []
    out = []

    def add(key: str, value, y: Inputs, text: str) -> None:
        e = estimate(y)
        saved = _saved(base, e) / GIB
        if saved > 0.01 or e.fits:
            out.append({"key": key, "value": value, "fits": e.fits, "saves_gib": round(saved, 2), "text": text})

    def bound(key: str, field_name: str, lo: int, hi: int) -> None:
        best = _largest(lo, hi, lambda v: estimate(replace(x, **{field_name: v})).fits)
        if best is not None and best < hi:
            add(key, best, replace(x, **{field_name: best}), f"{key} <= {best} fits")
        elif best is None and lo < getattr(x, field_name):
            add(key, lo, replace(x, **{field_name: lo}), f"{key}={lo} helps but is not enough alone")

    bound("trainer.per_device_train_batch_size", "batch", 1, x.batch)
    if not x.checkpointing:
        add(
            "trainer.activation_checkpointing",
            True,
            replace(x, checkpointing=True),
            "trainer.activation_checkpointing=true",
        )
    bound("trainer.max_completion_length", "completion", 16, x.completion)
    bound("data.max_prompt_length", "prompt", 16, x.prompt)
    if x.ref_model:
        add("trainer.beta", 0.0, replace(x, ref_model=False), "trainer.beta=0.0 (no reference model)")
    for stage in (2, 3):
        if x.zero_stage < stage and x.world_size > 1:
            add("deepspeed", f"zero{stage}", replace(x, zero_stage=stage), f"deepspeed=zero{stage}")
    if x.zero_stage >= 2 and not x.offload_optimizer:
        add(
            "deepspeed",
            f"zero{x.zero_stage}_offload",
            replace(x, offload_optimizer=True, offload_params=x.zero_stage == 3),
            f"deepspeed=zero{x.zero_stage}_offload",
        )
    if not x.lora_params:
        lora = lora_params(
            x.hidden, x.heads * x.head_dim, x.kv_dim, x.intermediate, x.layers, x.vocab, 16, DECODER_LINEAR_LAYERS
        )
        add("peft", "lora", replace(x, lora_params=lora, ref_model=False), "peft=lora (r=16 on all linear layers)")
    if x.vllm_mode == "colocate":
        utils = [u / 100 for u in range(5, int(x.vllm_util * 100))]
        fitting = [u for u in utils if estimate(replace(x, vllm_util=u)).fits]
        if fitting:
            add(
                "vllm.gpu_memory_utilization",
                max(fitting),
                replace(x, vllm_util=max(fitting)),
                f"vllm.gpu_memory_utilization <= {max(fitting):.2f}",
            )
        if not x.vllm_sleep:
            add("vllm.enable_sleep_mode", True, replace(x, vllm_sleep=True), "vllm.enable_sleep_mode=true")
    if x.vllm_mode == "server" and base.vllm is not None and not base.vllm.fits:
        if x.vllm_util < 0.95:
            add("vllm.gpu_memory_utilization", 0.95, replace(x, vllm_util=0.95), "vllm.gpu_memory_utilization=0.95")
        add(
            "vllm.tensor_parallel_size",
            x.vllm_tp * 2,
            replace(x, vllm_tp=x.vllm_tp * 2),
            f"vllm.tensor_parallel_size={x.vllm_tp * 2} (and vllm.gpus={x.vllm_tp * 2})",
        )
        needed = x.prompt + x.completion
        if x.vllm_max_len > needed:
            add("vllm.max_model_length", needed, replace(x, vllm_max_len=needed), f"vllm.max_model_length={needed}")
    for item in out:
        item["text"] += f" (saves {item['saves_gib']:.1f} GiB)" if item["saves_gib"] > 0 else ""
    return sorted(out, key=lambda s: (not s["fits"], -s["saves_gib"]))


def fit(cfg: DictConfig, plan) -> list[tuple[str, object, object]] | None:
    """preflight.on_oom=fit: the changes (key, old, new) that make a predicted OOM fit while the
    experiment stays the same, or None. First a smaller per-device batch with more accumulation
    steps (the batch per optimizer step and the generation batch unchanged: the same updates,
    more micro-steps), then memory-only switches (activation checkpointing, vLLM sleep mode,
    optimizer offload), then both."""
    x = inputs(cfg, plan)
    t = cfg.trainer
    switches = []
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

    def split(b: int) -> tuple[list, dict]:
        factor = x.batch // b
        changes = [
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


def plan_and_estimate(cfg: DictConfig, gpus: int, config_path: str = "config.yaml"):
    """(launch plan, memory estimate) of `cfg` as the driver makes them, for a config that passed its
    checks elsewhere (a sweeper's trial, a measured run): model=auto's numbers read first."""
    from grpo_exp.config import model_info
    from grpo_exp.planning import placement

    model_info.complete(cfg.model)
    plan = placement.make_plan(cfg, config_path, detected_gpus=gpus)
    return plan, preflight(cfg, plan)


def preflight(cfg: DictConfig, plan) -> dict:
    """The memory part of plan.json."""
    x = inputs(cfg, plan)
    e = estimate(x)
    errors = [] if e.vllm is None or e.vllm.fits else [f"vLLM engine: {n}" for n in e.vllm.notes[:1]]
    notes = [] if cfg.data.max_prompt_length else ["data.max_prompt_length is null: prompts assumed to be 512 tokens"]
    notes += list(cfg.model.get("planner_notes") or [])  # what this architecture has that the formulas do not model
    notes += _setting_notes(cfg, x)
    return {
        "fits": e.fits,
        "device": plan.device,
        "train": e.train.to_dict(),
        "vllm": e.vllm.to_dict() if e.vllm else None,
        "errors": errors + [n for n in e.train.notes],
        "suggestions": suggest(x),
        "notes": notes,
    }


def _setting_notes(cfg: DictConfig, x: Inputs) -> list[str]:
    """Settings that change what runs in a way the plan reads differently from the user's intent."""
    notes = []
    needed = x.prompt + x.completion
    if x.vllm_mode != "off" and cfg.vllm.max_model_length is not None and cfg.vllm.max_model_length < needed:
        notes.append(
            f"vllm.max_model_length {cfg.vllm.max_model_length} < prompt + completion ({needed} tokens): vLLM ends "
            "such generations at its limit, so long prompts get shorter completions (the plan sizes the KV cache by "
            "the limit)"
        )
    if cfg.trainer.use_liger_kernel:
        notes.append(
            "trainer.use_liger_kernel: planned as trl's fused LM head (Liger's fused linear GRPO loss also never "
            "holds the "
            "full logits; its chunks differ) and unpatched layers; Liger's smaller RMSNorm/SwiGLU activations are "
            "not modelled"
        )
    if cfg.trainer.eval_strategy != "no":
        notes.append(
            f"evaluation generates for {cfg.trainer.per_device_eval_batch_size} held-out completions per rank "
            "(trainer.per_device_eval_batch_size) between steps: planned as no larger than a training generation batch"
        )
    if cfg.model.get("vision_parameters"):
        notes.append(
            f"vision tower: {cfg.model.vision_parameters / 1e9:.2f}B of the {x.params / 1e9:.2f}B parameters, in "
            "weights "
            f"({'frozen under LoRA' if x.lora_params else 'trained: gradients and optimizer states too'})"
        )
    if x.vllm_mode == "off" and cfg.trainer.use_transformers_continuous_batching:
        notes.append(
            "trainer.use_transformers_continuous_batching: transformers reserves a paged KV cache for generate() "
            "from the "
            "free memory at start-up (ContinuousBatchingConfig); the plan counts only this rank's generation batch's "
            "KV cache"
        )
    return notes


def summary_keys(memory: dict) -> dict:
    """The plan's figures as summary.json keys (plan/<role>/peak_gib, .../<component>_gib, .../phases/<phase>_gib)."""
    out = {}
    for role in ("train", "vllm"):
        r = memory.get(role)
        if r and r.get("peak_gib") is not None:  # plan.json's vllm holds the placement even without an engine
            out[f"plan/{role}/peak_gib"] = r["peak_gib"]
            out.update({f"plan/{role}/{k}_gib": v for k, v in r["components_gib"].items()})
            out.update({f"plan/{role}/phases/{k}_gib": v for k, v in r["phases_gib"].items()})
    return out


def print_report(memory: dict) -> None:
    """The breakdown as terminal tables (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=110)
    for role in ("train", "vllm"):
        r = memory[role]
        if r is None:
            continue
        verdict = "[green]fits[/]" if r["fits"] else "[red]OOM[/]"
        unit = "GPU" if memory["device"] == "cuda" else "process (host RAM)"
        console.print(f"{role}: peak per {unit} {r['peak_gib']:.2f} of {r['capacity_gib']:.2f} GiB - {verdict}")
        table = Table()
        table.add_column("component")
        table.add_column("GiB", justify="right")
        for name, gib in r["components_gib"].items():
            if gib:
                table.add_row(name, f"{gib:.2f}")
        table.add_section()
        for name, gib in r["phases_gib"].items():
            table.add_row(f"phase: {name}", f"{gib:.2f}")
        console.print(table)
        for note in r["notes"]:
            console.print(f"  {note}")
    for line in memory["errors"] + memory["notes"]:
        console.print(f"  note: {line}")
    if memory["suggestions"]:
        console.print("what would fit (ranked):")
        for item in memory["suggestions"]:
            console.print(f"  {'[green]fits [/]' if item['fits'] else 'helps'}  {item['text']}")
