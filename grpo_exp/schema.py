"""Typed schemas for the config tree, registered with Hydra's ConfigStore.

conf/config.yaml starts its defaults list with `schema`, so every group file is merged onto these
dataclasses: Hydra itself then rejects an unknown key or a wrongly typed value at compose time,
before any run dir exists. Field names of `TrainerConfig` are GRPOConfig's, verbatim; those of
`VllmConfig` are GRPOConfig's `vllm_*` fields without the prefix (tests/test_config.py checks both
against trl). `deepspeed` stays an untyped dict: it is DeepSpeed's own JSON format, which DeepSpeed
validates.

This module must stay importable without torch/transformers/trl: the driver and the planner use it.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


@dataclass
class ModelConfig:
    name: str = MISSING  # short name used in run names and W&B tags
    name_or_path: Optional[str] = None  # hub id or local directory; null builds the local tiny model
    model_type: str = MISSING  # transformers model_type: qwen2 | qwen3 | llama
    dtype: str = "bfloat16"  # TRL model_init_kwargs.dtype; bytes per weight: 2 (bf16/fp16) or 4 (fp32)
    # Architecture numbers, copied from the model's config.json, so planning needs no download.
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    head_dim: int = MISSING
    vocab_size: int = MISSING
    tie_word_embeddings: bool = MISSING
    max_position_embeddings: int = MISSING
    num_parameters: int = MISSING  # exact count for these numbers (tests check it on the meta device)


@dataclass
class DataConfig:
    name: str = MISSING
    loader: str = MISSING  # toy_math | gsm8k | jsonl: the function in grpo_exp/data.py that reads it
    path: Optional[str] = None  # hub dataset id or a local .json/.jsonl file
    subset: Optional[str] = None  # hub dataset config name (gsm8k: main)
    split: str = "train"
    num_samples: Optional[int] = None  # keep the first N rows (toy_math: how many to generate)
    system_prompt: Optional[str] = None
    # Prompts longer than this many tokens (chat template applied) are dropped before training.
    # Long prompts are the first cause of GRPO OOMs: memory grows with prompt + completion length.
    max_prompt_length: Optional[int] = None
    # name -> {_target_: dotted path of a reward function, extra kwargs}; order = trainer.reward_weights order
    rewards: Dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainerConfig:
    """GRPOConfig fields, verbatim. Values that change memory are commented in conf/trainer/grpo.yaml."""

    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    num_generations: int = 4
    generation_batch_size: Optional[int] = None
    steps_per_generation: Optional[int] = None
    max_completion_length: int = 32
    num_iterations: int = 1
    gradient_checkpointing: bool = False
    bf16: bool = False
    beta: float = 0.0
    epsilon: float = 0.2
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    mask_truncated_completions: bool = False
    reward_weights: Optional[List[float]] = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "linear"
    warmup_steps: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    optim: str = "adamw_torch"
    max_steps: int = -1
    num_train_epochs: float = 1.0
    logging_steps: float = 1
    save_strategy: str = "no"
    save_steps: float = 500
    log_completions: bool = False
    shuffle_dataset: bool = True
    disable_dropout: bool = False
    ds3_gather_for_generation: bool = True
    dataloader_num_workers: int = 0


@dataclass
class VllmConfig:
    """GRPOConfig `vllm_*` fields without the prefix, plus `gpus` (grpo_exp's own)."""

    mode: str = "off"  # off | colocate | server  (off -> use_vllm=False, else vllm_mode)
    gpus: int = 0  # GPUs given to the `trl vllm-serve` process (server mode only)
    gpu_memory_utilization: float = 0.3
    max_model_length: Optional[int] = None
    tensor_parallel_size: int = 1
    enable_sleep_mode: bool = False
    model_impl: str = "vllm"
    server_host: Optional[str] = None  # where trainers reach the server; null = node 0 (MASTER_ADDR)
    server_port: int = 8000
    server_timeout: float = 240.0
    group_port: int = 51216
    importance_sampling_correction: bool = True


@dataclass
class PeftConfig:
    enabled: bool = False
    # peft.LoraConfig fields, verbatim. Trainable parameters (and their Adam states) grow with r.
    r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: List[str] = field(default_factory=list)


@dataclass
class TopologyConfig:
    name: str = MISSING
    nnodes: int = 1
    # null = detect this machine's GPUs (CUDA_VISIBLE_DEVICES honoured); 0 = CPU processes.
    gpus_per_node: Optional[int] = None
    gpu_name: Optional[str] = None
    gpu_memory_gib: float = 80.0  # per-GPU capacity used for planning
    cpu_procs: int = 2  # training processes per node when there is no GPU (gloo backend)
    symmetric: bool = False  # vllm=server: every node leaves the server's GPU count idle (7+7, not 7+8)
    # Where this node sits; defaults come from torchrun's usual env vars (see conf/config.yaml).
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    rendezvous_timeout_s: int = 300  # a node that has not joined by then fails the run, naming it
    collective_timeout_s: int = 1800  # GRPOConfig.ddp_timeout: a collective waiting longer fails


@dataclass
class SlurmConfig:
    cluster: Optional[str] = None  # null = SLURM (sbatch); local = submitit's local executor, to rehearse on one machine
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_min: int = 240  # job time limit, minutes
    cpus_per_task: int = 16
    mem_gb: Optional[int] = None
    constraint: Optional[str] = None
    additional: Dict[str, Any] = field(default_factory=dict)  # any other sbatch option, name -> value


@dataclass
class LauncherConfig:
    name: str = "local"  # local: this node's share via torchrun | slurm: one submitit task per node
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


@dataclass
class WatchdogConfig:
    # No step finished for this long: dump every rank's Python stacks into <run dir>/stacks and
    # fail the run (status stalled) instead of hanging until a scheduler kills it. null = off.
    stall_s: Optional[float] = 1800.0


@dataclass
class LoggerConfig:
    name: str = MISSING  # wandb | none
    project: str = "grpo_exp"
    entity: Optional[str] = None
    group: Optional[str] = None  # W&B group: defaults to the experiment name
    mode: str = "auto"  # auto (online with credentials, else offline) | online | offline
    tags: List[str] = field(default_factory=list)


@dataclass
class MemoryConfig:
    telemetry: bool = True  # per-phase peak memory on every rank -> memory/* metrics
    # Cap each rank's memory (CUDA: allocator fraction of the GPU; CPU: RLIMIT_DATA) to rehearse
    # OOM handling on a small machine. null = no cap.
    limit_gib: Optional[float] = None


@dataclass
class PreflightConfig:
    on_oom: str = "refuse"  # refuse: a predicted OOM stops action=run with exit 3 | warn: run anyway


@dataclass
class SweepConfig:
    # Trials the planner predicts to OOM are recorded as predicted_oom and skipped; true runs them
    # anyway (the frontier sweep needs the real answer).
    run_predicted_oom: bool = False


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    deepspeed: Dict[str, Any] = field(default_factory=dict)  # DeepSpeed JSON; {} = DeepSpeed off
    peft: PeftConfig = field(default_factory=PeftConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    action: str = "run"  # run: check, then train | plan: check, write plan.json, print, launch nothing
    experiment: str = "default"  # names the run family (W&B group)
    run_name: Optional[str] = None
    seed: int = 42


SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"


def register_configs() -> None:
    """Make `schema`, the `sweep` group (files in top-level sweeps/) and our resolvers known to Hydra."""
    # ${eq:a,b}: lets trainer.bf16 follow model.dtype. Resolved before the config is frozen.
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a) == str(b))
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    for path in sorted(SWEEPS_DIR.glob("*.yaml")):
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")
