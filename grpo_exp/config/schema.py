"""Typed schemas for the config tree, registered with Hydra's ConfigStore.

conf/config.yaml starts its defaults list with `schema`, so every group file is merged onto these
dataclasses: Hydra itself then rejects an unknown key or a wrongly typed value at compose time,
before any run dir exists. Field names of `TrainerConfig` are GRPOConfig's, verbatim; those of
`VllmConfig` are GRPOConfig's `vllm_*` fields without the prefix (tests/config/test_schema.py checks both
against trl). `deepspeed` stays an untyped dict: it is DeepSpeed's own JSON format, which DeepSpeed
validates.

This module must stay importable without torch/transformers/trl: the driver and the planner use it.
"""

from dataclasses import dataclass, field, is_dataclass, make_dataclass
from typing import Any, Dict, List, Optional, get_origin, get_type_hints

from omegaconf import MISSING

from grpo_exp.config import launcher_options
from grpo_exp.config.model_schema import ModelConfig
from grpo_exp.config.trl_schema import TrainerFields, VllmFields


@dataclass
class DataConfig:
    name: str = MISSING
    # {_target_: a function returning a datasets.Dataset, **its kwargs}: a shipped loader (grpo_exp/data/) or your own
    # (data.loader._target_=my_pkg.load), checked before launch alike (columns, rows, prompts)
    loader: Dict[str, Any] = MISSING
    # hf / gsm8k: anything datasets.load_dataset reads: a hub dataset id, a local dataset directory
    # (save_to_disk or a folder of data files), or a .json/.jsonl/.csv/.parquet file.
    path: Optional[str] = None
    subset: Optional[str] = None  # hub dataset config name (gsm8k: main)
    split: str = "train"
    prompt_column: str = "prompt"  # the column holding prompts: a string or a list of chat messages
    answer_column: str = "answer"  # renamed to `answer`, the argument name grpo_exp's reward functions take
    # true: a string prompt becomes a user message and the tokenizer's chat template applies;
    # false: string prompts go to the model as raw text (base models without a chat template).
    conversational: bool = True
    num_samples: Optional[int] = None  # keep the first N rows (toy_math: how many to generate)
    system_prompt: Optional[str] = None  # prepended as a system message (conversational prompts only)
    # Prompts longer than this many tokens (chat template applied) are dropped before training.
    # Long prompts are the first cause of GRPO OOMs: memory grows with prompt + completion length.
    max_prompt_length: Optional[int] = None
    # Vision-language models: images in each prompt and their size in pixels [height, width] (null: the image
    # processor's max_pixels, the largest it makes). Each adds (h/patch x w/patch) / merge^2 tokens to the prompt and
    # its patches' activations to the vision tower; GRPO repeats every image for each generation.
    images_per_prompt: int = 0
    image_size: Optional[List[int]] = None
    # Held-out prompts for trainer.eval_strategy: a file or directory in any format data=hf reads (same
    # columns), or a split of data.path (hf, gsm8k loaders). GRPO evaluates by generating for them.
    eval_path: Optional[str] = None
    eval_split: Optional[str] = None
    # name -> {_target_: dotted path of a reward function, extra kwargs}; order = trainer.reward_weights order.
    # TRL calls each with the completions and every dataset column as keyword arguments.
    rewards: Dict[str, Any] = field(default_factory=dict)


# No @dataclass here: TrainerConfig adds no field, and a second decorator would only generate TrainerFields' 159-field
# __init__, __repr__ and __eq__ again (~8 ms of every start). Its fields, defaults and methods are inherited.
class TrainerConfig(TrainerFields):
    """Every GRPOConfig field but the owned ones, TRL's defaults (generated: trl_schema.py).
    conf/trainer/grpo.yaml holds only what grpo_exp sets differently, with the reason."""


@dataclass
class VllmConfig(VllmFields):
    """GRPOConfig's `vllm_*` fields without the prefix (generated: trl_schema.py), plus grpo_exp's own."""

    mode: str = "off"  # off | colocate | server  (off -> use_vllm=False, else vllm_mode)
    # GPUs of node 0 given to the vLLM server (server mode); null = 1. With
    # vllm.nodes=1 the serving node serves on all its GPUs instead.
    gpus: Optional[int] = None
    # Dedicated serving nodes: 1 = the last node only serves (all its GPUs, tensor_parallel_size per
    # engine, data parallel over the rest), the other nodes train on all theirs. 0 = the server on
    # vllm.gpus of node 0. TRL 1.16's client talks to one server, so at most 1.
    nodes: int = 0
    server_host: Optional[str] = None  # type: ignore[assignment]  # where trainers reach the server; null = node 0 (MASTER_ADDR)
    # The address the vLLM server listens on. TRL's server has no authentication: whoever reaches
    # it can generate or replace the policy's weights. null = 127.0.0.1 when every trainer runs on
    # the server's node, else topology.master_addr (the cluster network), never 0.0.0.0 unasked.
    server_bind: Optional[str] = None
    # Ports (GRPOConfig's vllm_server_port / vllm_group_port). auto: free ports picked by the driver
    # before the config is frozen (single-node runs); a multi-node run names them (grpo_exp/launching/ports.py).
    server_port: Any = "auto"
    group_port: Any = "auto"
    # Dedicated serving node (vllm.nodes=1): its driver answers the training nodes here (its config
    # fingerprint, and the stop at the end of the run). auto as the ports above (multi-node: 51217).
    agent_port: Any = "auto"
    # How the policy's weights reach the server after each optimizer step (server mode). nccl: TRL's NCCL
    # weight-transfer engine (CUDA on both ends). filesystem: rank 0 writes safetensors to weight_sync_dir and the
    # server reloads them (training/weight_sync.py); the host RAM and disk of one copy of the weights, and its
    # write time, are planned. auto: nccl on GPU ranks, filesystem on CPU ranks (the only one that runs there).
    weight_sync: str = "auto"
    # filesystem: the directory every node reads (shared storage on multi-node runs); null = <run dir>/weight_sync
    weight_sync_dir: Optional[str] = None
    # vLLM's CPU build only: its KV cache in whole GiB (VLLM_CPU_KVCACHE_SPACE), in each engine's host RAM; GPU
    # engines size theirs from gpu_memory_utilization instead
    cpu_kv_cache_gib: int = 1
    # The server's own engine flags (`vllm serve`; TRL builds the colocated engine itself, so server mode
    # only). Each changes the server GPU's memory, and the planner plans them (planning/vllm_engine.py):
    enforce_eager: bool = False  # true: no CUDA graphs (their memory freed; decoding slower)
    max_num_seqs: Optional[int] = None  # sequences per step (null: vLLM's default, 1024 on >= 70 GiB GPUs, else 256)
    # tokens per step, the size vLLM profiles its activations at (null: vLLM's default, 8192 on >= 70 GiB, else 2048)
    max_num_batched_tokens: Optional[int] = None
    kv_cache_dtype: str = "auto"  # auto (the model's) | fp8 | fp8_e4m3 | fp8_e5m2: fp8 halves KV bytes per token
    enable_prefix_caching: Optional[bool] = None  # null: vLLM's default (on)
    # The KV cache's size in bytes (vLLM's --kv-cache-memory): set, vLLM skips sizing it from
    # gpu_memory_utilization, which it then no longer respects
    kv_cache_memory_bytes: Optional[int] = None


@dataclass
class EnvConfig:
    """What the policy can call during an episode: TRL's `tools` and `environment_factory`. Everything named
    here is imported and run inside the training processes with the user's rights: name only code you trust."""

    name: str = "none"  # the option (conf/env/<name>.yaml), or your own label
    # Functions the model may call, by dotted path; each needs type hints and a Google-style docstring (TRL
    # describes them to the model from those).
    tools: List[str] = field(default_factory=list)
    # One environment per episode: {_target_: pkg.MyEnv, <its keyword arguments>}. Its reset(**row) starts the
    # episode (a returned string is appended to the prompt; with data=none it is the prompt), its public methods
    # are tools, and an optional get_reward() makes it a reward source. A `base_url` argument (an OpenEnv-style
    # client of an environment server) is checked to answer before launch.
    factory: Any = None
    # Several: name -> {_target_: ...}; each row's `environment` column picks one.
    factories: Dict[str, Any] = field(default_factory=dict)
    # The training processes' working directory, where a relative path in a tool, an environment or a reward
    # (TRL's grpo_agent opens biogrid.db) resolves; null = the directory grpo_exp was started in
    working_dir: Optional[str] = None


@dataclass
class PeftConfig:
    enabled: bool = False
    # peft.LoraConfig fields, verbatim. Trainable parameters (and their Adam states) grow with r.
    r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: List[str] = field(default_factory=list)
    # 3-D parameters LoRA adapts (PEFT's ParamWrapper): a mixture of experts' fused experts, e.g.
    # [mlp.experts.gate_up_proj, mlp.experts.down_proj]; r x experts x (in + out) trainable parameters each;
    # lora_dropout is then 0 unless given (PEFT's ParamWrapper takes no dropout)
    target_parameters: List[str] = field(default_factory=list)


@dataclass
class TopologyConfig:
    name: str = MISSING
    nnodes: int = 1
    # null = detect this machine's GPUs (CUDA_VISIBLE_DEVICES honoured); 0 = CPU processes.
    gpus_per_node: Optional[int] = None
    # The card planned against: null = the one detected on the machine that plans (NVML), else 80 GiB with a note.
    # A name that differs from the detected card is a warning at action=run.
    gpu_name: Optional[str] = None
    gpu_memory_gib: Optional[float] = None  # capacity of one GPU (GiB = 2^30 bytes)
    cpu_procs: int = 2  # training processes per node when there is no GPU (gloo backend)
    # RAM of one node, GiB: offloaded optimizer states and weights, vLLM's sleeping weights and every process
    # live there (action=plan adds them up per node). null: this machine's RAM where this machine trains
    # (topology=local), else not checked
    host_memory_gib: Optional[float] = None
    symmetric: bool = False  # vllm=server: every node leaves the server's GPU count idle (7+7, not 7+8)
    # Where this node sits; defaults come from torchrun's usual env vars (see conf/config.yaml).
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    rendezvous_timeout_s: int = 300  # a node that has not joined by then fails the run, naming it
    collective_timeout_s: int = 1800  # GRPOConfig.ddp_timeout: a collective waiting longer fails


@dataclass
class LauncherName:
    name: str = "local"  # local: this node's share via torchrun | slurm: one submitit task per node | kubernetes


# launcher.name, then launcher.<name>.* for every launcher with options of its own: each launcher's config.py holds
# them (config/launcher_options.py), so a new launcher adds its section without an edit here.
LauncherConfig = make_dataclass(
    "LauncherConfig",
    [
        (name, module.Config, field(default_factory=module.Config))
        for name, module in launcher_options.modules().items()
    ],
    bases=(LauncherName,),
)
LauncherConfig.__module__ = __name__  # where pickle finds it (config/registry.py keeps the built schema as a pickle)


@dataclass
class WatchdogConfig:
    # No step finished for this long: dump every rank's Python stacks into <run dir>/stacks and
    # fail the run (status stalled) instead of hanging until a scheduler kills it. null = off.
    stall_s: Optional[float] = 1800.0
    # Multi-node: every rank beats through the rendezvous store; a node unheard of for this long (its link cut, its
    # machine gone) is lost: every reachable rank's stacks, status node_lost, instead of a collective that waits out
    # gloo's or NCCL's 30-minute timeout. A rank that fails ends the other nodes' ranks within a beat. null = off.
    heartbeat_s: Optional[float] = 60.0


@dataclass
class PreemptionConfig:
    # A stopped run (SIGTERM/SIGUSR1/SIGUSR2 to a rank, or SIGINT/SIGTERM/SIGHUP to the driver) saves
    # a checkpoint at the next step boundary and ends as `preempted`; the driver waits this long for
    # it before SIGKILL (torchrun itself gives its ranks 30 s).
    grace_s: float = 60.0


@dataclass
class FsdpConfig:
    """PyTorch FSDP2 (`fully_shard`) through transformers and accelerate: GRPOConfig's `fsdp=True` and its
    `fsdp_config`, whose keys these are verbatim (name, enabled and shard_group are grpo_exp's own).
    One sharding per run: refused beside a DeepSpeed stage."""

    name: str = "none"  # none | full_shard | full_shard_offload | hybrid_shard
    enabled: bool = False
    version: int = 2  # FSDP2; transformers deprecates FSDP1 and grpo_exp plans only FSDP2
    # memory: true frees each layer's gathered weights after its forward (gathered again in backward);
    # false keeps every layer gathered from its forward to its backward (one all-gather less per layer)
    reshard_after_forward: bool = True
    # memory: parameters, gradients and Adam states on host RAM (the GPU holds the gathered layers only);
    # the optimizer step runs on CPU. Host RAM per node: action=plan shows it
    cpu_offload: bool = False
    # memory: FSDP's own activation checkpointing (instead of trainer.gradient_checkpointing, which
    # transformers refuses beside it and which all-gathers each layer once more in backward)
    activation_checkpointing: bool = False
    # memory (host): only rank 0 reads the checkpoint; the others start empty and receive it by broadcast
    cpu_ram_efficient_loading: bool = False
    state_dict_type: str = "FULL_STATE_DICT"  # checkpoints: FULL_STATE_DICT | SHARDED_STATE_DICT
    auto_wrap_policy: str = "TRANSFORMER_BASED_WRAP"
    transformer_layer_cls_to_wrap: Optional[List[str]] = None  # null: the model's decoder layer (_no_split_modules)
    # world: shard over every rank | node: shard within a node, replicate across nodes (HSDP: gathers stay
    # on the node's fast links; each node holds a whole copy of the model states)
    shard_group: str = "world"


@dataclass
class LoggerConfig:
    name: str = MISSING  # a tracker: a module of grpo_exp/trackers/ (conf/logger/ lists them), or none
    also: List[str] = field(default_factory=list)  # more trackers at once: logger=wandb logger.also=[tensorboard]
    project: str = "grpo_exp"  # the tracker's project (W&B's, trackio's, ...)
    entity: Optional[str] = None
    group: Optional[str] = None  # W&B group: defaults to the experiment name
    mode: str = "auto"  # trackers with a server: auto (online with credentials, else offline) | online | offline
    tags: List[str] = field(default_factory=list)
    # quiet: the console shows the plan, one line per logging step and the run report; TRL's metric
    # dicts, library warnings and the W&B footer go to train.log only. full: everything, as printed.
    console: str = "quiet"
    # A tracker of your own beside logger.name (none included): a class with log_dict(metrics, step) and close()
    # (grpo_exp.trackers.Tracker); the logger's keys the schema does not have (++logger.path=...) go to its constructor.
    _target_: Optional[str] = None


@dataclass
class MemoryConfig:
    telemetry: bool = True  # per-phase peak memory on every rank -> memory/* metrics
    # Cap each rank's memory (CUDA: allocator fraction of the GPU; CPU: RLIMIT_DATA) to rehearse
    # OOM handling on a small machine. null = no cap.
    limit_gib: Optional[float] = None


@dataclass
class PreflightConfig:
    # A predicted OOM: refuse (exit 3) | warn (run anyway) | fit (apply the best change that keeps the
    # experiment the same - batch per optimizer step, generation batch, num_generations - or only
    # saves memory; exit 3 if none fits). Applied changes are listed in `fitted` ("key: old -> new").
    on_oom: str = "refuse"
    fitted: List[str] = field(default_factory=list)
    # A file from `grpo-exp calibrate <measured runs>`: per-component correction factors the
    # planner applies to plans on the same kind of device (null: the formulas as they are).
    calibration: Optional[str] = None
    # trl, vLLM and transformers installed outside each other's declared ranges (package metadata, every
    # node that trains or serves): refuse (exit 2) | warn (run anyway, the mismatch in the log)
    versions: str = "refuse"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    deepspeed: Dict[str, Any] = field(default_factory=dict)  # DeepSpeed JSON; {} = DeepSpeed off
    fsdp: FsdpConfig = field(default_factory=FsdpConfig)
    peft: PeftConfig = field(default_factory=PeftConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)  # type: ignore[valid-type]  # (make_dataclass)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    action: str = "run"  # run: check, then train | plan: check, write plan.json, print, launch nothing
    resume: Optional[str] = None  # a run dir: continue that run from its latest checkpoint with its frozen config
    experiment: str = "default"  # names the run family (W&B group)
    run_name: Optional[str] = None
    seed: int = 42
    # What a sweep optimizes (the Optuna sweeper's objective, the frontier's best trial): a name of
    # rundir.OPTIMIZED_METRICS or any numeric key of summary.json / its final_metrics
    optimized_metric: str = "tokens_per_s"


def is_open_mapping(key: str) -> bool:
    """Whether `key` ('data.rewards', 'env.factories') is a Dict field of the schema: a mapping whose names
    are the user's, not the schema's."""
    kind: Any = Config
    *parents, name = key.split(".")
    for part in parents:
        kind = get_type_hints(kind).get(part) if is_dataclass(kind) else None
    hints = get_type_hints(kind) if is_dataclass(kind) else {}
    return get_origin(hints.get(name)) is dict
