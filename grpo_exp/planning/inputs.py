"""The planner's inputs: every number the memory arithmetic reads, taken from the config and the launch
plan once (`inputs(cfg, plan)`), so the arithmetic (memory.py) is pure and fixes.py can re-plan dozens of
variants in milliseconds. Pure Python: no torch import.
"""

from dataclasses import dataclass
from types import SimpleNamespace

from omegaconf import DictConfig

from grpo_exp import DECODER_LINEAR_LAYERS, GIB
from grpo_exp.config import env
from grpo_exp.core import cpu, packages, plain
from grpo_exp.models import model_families
from grpo_exp.planning import calibration, cuda_runtime, lora, placement, prompt_tokens, vision

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}
QK_NORM_MODELS = ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text")  # q_norm / k_norm in attention
SANDWICH_NORM_MODELS = ("gemma2", "gemma3", "gemma3_text")  # post-attention and post-MLP norms too


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
    # TRL scores completions without gradients (its `score` phase) for the reference model (beta > 0), for the
    # policy's old log-probs when generation and optimizer steps are not aligned, or for vLLM's importance sampling
    scores: bool = True
    agentic: bool = False  # tools or environments: the `tools` phase runs them
    gradient_accumulation: int = 1  # gradient_accumulation_steps: gradients outlive the optimizer step's phase
    device: str = "cuda"
    autocast: bool = False  # 16-bit autocast over float32 weights (GRPOConfig bf16/fp16 with model.dtype float32)
    qk_norm: bool = False  # RMSNorm on q and k (Qwen3, Gemma-3): more saved activations
    sandwich_norms: bool = False  # norms after attention and the MLP too (Gemma-2/3): one more fp32 hidden copy
    address_space_limited: bool = False  # a CPU rank under memory.limit_gib (RLIMIT_DATA)
    # DeepSpeed's buffers, in elements (zero_optimization; "auto" as the HF integration fills it)
    reduce_bucket: float = 5e8
    allgather_bucket: float = 5e8
    overlap_comm: bool = False
    zero3_max_live: float = 1e9  # stage3_max_live_parameters
    zero3_prefetch: float = 5e7  # stage3_prefetch_bucket_size
    # FSDP2 (fsdp group): states sharded over fsdp_shard ranks (world, or one node's for shard_group=node);
    # reshard_after_forward frees each layer's gathered weights after its forward; offload keeps the shards
    # in host RAM. tied: the LM head is the embedding (one root tensor gathered, not two).
    fsdp: bool = False
    fsdp_shard: int = 1
    fsdp_reshard: bool = True
    fsdp_offload: bool = False
    fsdp_ram_efficient_loading: bool = False
    tied: bool = False
    calibration: tuple = ()  # (group, factor) pairs from preflight.calibration (calibration.py)
    card: str | None = None  # the GPU's name (cuda_runtime.py)
    cuda_lazy: bool = True  # CUDA loads kernels as first used (known only where the card is detected here)
    card_runtime: float | None = None  # what the card holds besides tensors, as measured on it (preflight.calibration)
    # model.quantization: bytes per weight of the quantized linear layers (constants included; 0 = not
    # quantized), how many weights that covers, the dtype each layer is dequantized to while it runs,
    # and whether the checkpoint itself is quantized (vLLM then serves it at those bits too).
    quant_bytes: float = 0.0
    quantized_params: int = 0
    compute_bytes: int = 2
    prequantized: bool = False
    # The vLLM engine's shape (_vllm_engine below): TRL's for a colocated engine, the server's flags or vLLM's
    # defaults for a server; the installed vLLM's version (None: not installed here, today's rules).
    vllm_batched_tokens: int = 4096
    vllm_max_seqs: int = 256
    vllm_eager: bool = False
    vllm_kv_dtype: str = "auto"
    vllm_kv_memory: int | None = None
    vllm_version: tuple | None = None
    vllm_dtype_bytes: int = 2  # what vLLM serves: dtype=auto makes an fp32 checkpoint bf16; a server's --dtype
    vllm_cpu_kv_bytes: float = 2**30  # vLLM's CPU build: VLLM_CPU_KVCACHE_SPACE (vllm.cpu_kv_cache_gib)
    vllm_prefix_caching: bool = True  # vLLM's default; a state layer then holds two blocks per request
    vllm_fp32_state: bool = False  # vLLM's CPU build on a CPU with AVX-512 BF16: the SSM state in fp32 (families.py)
    # LoRA's adapters in a decoder layer: how many of its linear layers, their rank, dropout on (activations.py)
    lora_modules: int = 0
    lora_r: int = 0
    lora_dropout: bool = False
    weight_sync: str = "nccl"  # a server's: nccl | filesystem (placement.weight_sync)
    # A vision-language model's tower (model.vision, a namespace of its numbers; None for a text model) and the patches
    # of one sequence's images (data.images_per_prompt x the patches of one image): vision.py
    vision: object = None
    vision_patches: int = 0
    # A mixture of experts (families.py; 0 experts: dense): routed experts, top-k, one expert's width, the shared
    # expert's, how many layers are MoE (the rest dense), transformers' experts backend
    experts: int = 0
    top_k: int = 0
    expert_width: int = 0
    shared_width: int = 0
    moe_layers: int = 0
    experts_backend: str = "grouped_mm"
    # Layers by attention type (the rest full attention): sliding-window ones and their window; state layers (Gated
    # DeltaNet, Mamba2) and their numbers: conv channels, value channels, heads and head dims, conv kernel
    sliding_layers: int = 0
    sliding_window: int = 0
    linear_layers: int = 0
    linear_conv_dim: int = 0
    linear_value_dim: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0

    @property
    def full_layers(self) -> int:
        return self.layers - self.sliding_layers - self.linear_layers

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    def base_weight_bytes(self, dtype_bytes: int | None = None) -> float:
        """The base model's weights: quantized linear layers at their bytes per weight, the rest in model.dtype
        (or `dtype_bytes`: vLLM serves the rest at 16 bits)."""
        rest = self.dtype_bytes if dtype_bytes is None else dtype_bytes
        return self.quantized_params * self.quant_bytes + (self.params - self.quantized_params) * rest

    @property
    def activation_bytes(self) -> int:
        """Bytes per element of what layers compute: 16-bit under autocast or with 16-bit weights."""
        return 2 if self.autocast else self.dtype_bytes


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
        capacity = plan.gpu_memory_gib * GIB
    else:
        import psutil

        capacity = psutil.virtual_memory().total / max(1, plan.nodes[0].train_procs)
    limit = cfg.memory.limit_gib
    return min(capacity, limit * GIB) if limit else capacity


def host_capacity_bytes(cfg: DictConfig, plan) -> float | None:
    """One node's RAM: topology.host_memory_gib, else this machine's where this machine trains (the topology
    detects its GPUs, or the run is on CPU), else unknown (a cluster's nodes are not this machine)."""
    if cfg.topology.host_memory_gib is not None:
        return cfg.topology.host_memory_gib * GIB
    if cfg.topology.gpus_per_node is None or plan.device == "cpu":
        import psutil

        return float(psutil.virtual_memory().total)
    return None


def planned_prompt(cfg: DictConfig, device: str) -> int:
    """The prompt tokens a batch holds: on a GPU the data's longest prompt where the plan can count it
    (prompt_tokens.py), never more than data.max_prompt_length; unbounded and uncounted, 512 (a note says so).
    CPU ranks keep the bound: their plans (RSS, and address space under memory.limit_gib, which keeps what glibc
    freed) were fitted with its margin. A vision-language model's images add their tokens (vision.py)."""
    return _text_prompt(cfg, device) + image_tokens(cfg, _vision(cfg))


def _text_prompt(cfg: DictConfig, device: str) -> int:
    bound = cfg.data.max_prompt_length or 512
    counted = prompt_tokens.longest_prompt(cfg) if device == "cuda" else None
    return bound if counted is None else min(bound, counted)


def _vision(cfg: DictConfig):
    """model.vision as plain numbers (None for a text model)."""
    v = cfg.model.get("vision")
    return SimpleNamespace(**plain.mapping(v)) if v is not None else None


def image_tokens(cfg: DictConfig, v) -> int:
    """Tokens a prompt's images add to the language model's sequence (`v`: _vision(cfg))."""
    return cfg.data.images_per_prompt * vision.image_tokens(v, cfg.data.image_size) if v is not None else 0


def inputs(cfg: DictConfig, plan) -> Inputs:
    m, t = cfg.model, cfg.trainer
    capacity = capacity_bytes(cfg, plan)
    v = _vision(cfg)  # a vision-language model's tower, read once
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
        capacity=capacity,
        device=plan.device,
        batch=t.per_device_train_batch_size,
        steps_per_generation=t.steps_per_generation or t.gradient_accumulation_steps,
        gradient_accumulation=t.gradient_accumulation_steps,
        completion=t.max_completion_length,
        prompt=_text_prompt(cfg, plan.device) + image_tokens(cfg, v),
        checkpointing=activation_checkpointing(t),
        ref_model=t.beta > 0 and not cfg.peft.enabled,
        scores=_scores(cfg),
        agentic=env.active(cfg),
        lora_params=lora.trainable(cfg),
        lora_modules=sum(t in DECODER_LINEAR_LAYERS for t in cfg.peft.target_modules) if cfg.peft.enabled else 0,
        lora_r=cfg.peft.r,
        lora_dropout=bool(cfg.peft.lora_dropout),
        autocast=DTYPE_BYTES[m.dtype] == 4 and bool(t.bf16 or t.fp16),
        address_space_limited=plan.device == "cpu" and cfg.memory.limit_gib is not None,
        tied=bool(m.tie_word_embeddings),
        card=plan.gpu_name,
        cuda_lazy=plan.card_source != "detected" or cuda_runtime.lazy_loading(cuda_runtime.installed_cuda()),
        **calibration.inputs_for(cfg.preflight.get("calibration"), plan.device, plan.gpu_name),
        vllm_mode=cfg.vllm.mode,
        vllm_util=cfg.vllm.gpu_memory_utilization,
        vllm_tp=cfg.vllm.tensor_parallel_size,
        vllm_max_len=cfg.vllm.max_model_length or m.max_position_embeddings,
        vllm_sleep=cfg.vllm.enable_sleep_mode,
        vllm_fp32_state=plan.device == "cpu" and cpu.avx512_bf16(),  # a CPU run's engine runs on this machine
        weight_sync=placement.weight_sync(cfg.vllm, plan.device),
        vision=v,
        vision_patches=cfg.data.images_per_prompt * vision.image_patches(v, cfg.data.image_size) if v else 0,
        **_families(cfg.model),
        **_deepspeed(cfg),
        **_fsdp(cfg, plan),
        **_quantization(cfg),
        **_vllm_engine(cfg, capacity),
    )


def _families(m) -> dict:
    """The Inputs fields (`m`: model.*) of a mixture of experts and of layers by attention type."""
    n = model_families.counts(m)
    value_dim = m.linear_num_value_heads * m.linear_value_head_dim
    return {
        "qk_norm": m.model_type in QK_NORM_MODELS,
        "sandwich_norms": m.model_type in SANDWICH_NORM_MODELS,
        "experts": m.num_experts,
        "top_k": m.num_experts_per_tok,
        "expert_width": m.moe_intermediate_size,
        "shared_width": m.shared_expert_intermediate_size,
        "moe_layers": m.num_hidden_layers - len(m.mlp_only_layers) if m.num_experts else 0,
        "experts_backend": m.experts_implementation,
        "sliding_layers": n["sliding"],
        "sliding_window": m.sliding_window or 0,
        "linear_layers": n["linear"],
        "linear_conv_dim": 2 * m.linear_num_key_heads * m.linear_key_head_dim + value_dim,
        "linear_value_dim": value_dim,
        "linear_value_heads": m.linear_num_value_heads,
        "linear_key_head_dim": m.linear_key_head_dim,
        "linear_value_head_dim": m.linear_value_head_dim,
        "linear_conv_kernel": m.linear_conv_kernel_dim,
    }


def _scores(cfg: DictConfig) -> bool:
    """Whether TRL scores without gradients: a reference model, generation and optimizer steps not aligned, or
    vLLM's importance sampling."""
    t = cfg.trainer
    steps = t.steps_per_generation or t.gradient_accumulation_steps
    unaligned = t.gradient_accumulation_steps % (steps * t.num_iterations) != 0
    return t.beta != 0 or unaligned or (cfg.vllm.mode != "off" and bool(cfg.vllm.importance_sampling_correction))


def _deepspeed(cfg: DictConfig) -> dict:
    """The Inputs fields of the deepspeed group (zero_optimization; "auto" as the HF integration fills it)."""
    m, t, ds = cfg.model, cfg.trainer, cfg.deepspeed
    zero = ds.get("zero_optimization", {}) if ds else {}
    return {
        "zero_stage": int(zero.get("stage", 0)) if ds else 0,
        "offload_optimizer": bool(zero.get("offload_optimizer")),
        "offload_params": bool(zero.get("offload_param")),
        "ds3_gather_for_generation": t.ds3_gather_for_generation,
        "sub_group_size": float(zero.get("sub_group_size", 1e9)) if ds else 1e9,
        "reduce_bucket": _elements(zero.get("reduce_bucket_size"), m.hidden_size**2),
        "allgather_bucket": _elements(zero.get("allgather_bucket_size"), 5e8),
        "overlap_comm": bool(zero.get("overlap_comm", False)),
        "zero3_max_live": _elements(zero.get("stage3_max_live_parameters"), 1e9),
        "zero3_prefetch": _elements(zero.get("stage3_prefetch_bucket_size"), 0.9 * m.hidden_size**2),
    }


def _fsdp(cfg: DictConfig, plan) -> dict:
    f = cfg.fsdp
    return {
        "fsdp": bool(f.enabled),
        "fsdp_shard": _shard_group(cfg, plan),
        "fsdp_reshard": bool(f.reshard_after_forward),
        "fsdp_offload": bool(f.enabled and f.cpu_offload),
        "fsdp_ram_efficient_loading": bool(f.enabled and f.cpu_ram_efficient_loading),
    }


def _shard_group(cfg: DictConfig, plan) -> int:
    """The ranks FSDP2 shards over: every training rank, or one node's (shard_group=node: HSDP)."""
    if cfg.fsdp.shard_group == "node":
        return max(1, max(node.train_procs for node in plan.nodes))
    return max(1, plan.world_size)


# `vllm serve`'s (max_num_batched_tokens, max_num_seqs) on GPUs of >= 70 GiB and below (EngineArgs.get_batch_defaults)
SERVER_DEFAULTS = {True: (8192, 1024), False: (2048, 256)}
# TRL 1.16's colocated engine: max_num_batched_tokens=4096 ("Latest vLLM v1 memory profiler is misled by the high
# default value", trl/generation/vllm_generation.py) and max_num_seqs = its share of a generation batch.
COLOCATE_BATCHED_TOKENS = 4096


def _vllm_engine(cfg: DictConfig, capacity: float) -> dict:
    """The Inputs fields of the vLLM engine's shape. Colocated: TRL builds it (4096 batched tokens,
    max_num_seqs = per-device batch x TP x steps per generation). Server: the vllm.* flags, else vLLM's
    `vllm serve` defaults for this GPU size."""
    v, t = cfg.vllm, cfg.trainer
    installed = packages.installed("vllm")
    shape = {"vllm_version": installed.release if installed else None, "vllm_cpu_kv_bytes": v.cpu_kv_cache_gib * GIB}
    shape["vllm_prefix_caching"] = v.enable_prefix_caching is not False
    if v.mode == "colocate":
        steps = t.steps_per_generation or t.gradient_accumulation_steps
        seqs = t.per_device_train_batch_size * v.tensor_parallel_size * steps
        return {**shape, "vllm_batched_tokens": COLOCATE_BATCHED_TOKENS, "vllm_max_seqs": seqs}
    tokens, seqs = SERVER_DEFAULTS[capacity >= 70 * GIB]
    return {
        **shape,
        "vllm_dtype_bytes": DTYPE_BYTES[cfg.model.dtype],  # the server's --dtype is model.dtype
        "vllm_batched_tokens": v.max_num_batched_tokens or tokens,
        "vllm_max_seqs": v.max_num_seqs or seqs,
        "vllm_eager": bool(v.enforce_eager),
        "vllm_kv_dtype": v.kv_cache_dtype,
        "vllm_kv_memory": v.kv_cache_memory_bytes,
    }


def _quantization(cfg: DictConfig) -> dict:
    """The Inputs fields of model.quantization: every decoder linear layer quantized; embeddings, norms, lm_head and a
    vision tower stay in model.dtype (bitsandbytes skips the output layer; the tower is planned unquantized)."""
    q, m = cfg.model.get("quantization"), cfg.model
    if q is None:
        return {}
    q_dim, kv_dim = m.num_attention_heads * m.head_dim, m.num_key_value_heads * m.head_dim
    linear = m.num_hidden_layers * m.hidden_size * (2 * q_dim + 2 * kv_dim + 3 * m.intermediate_size)
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
