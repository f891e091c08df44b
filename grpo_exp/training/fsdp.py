"""The fsdp group as transformers reads it: GRPOConfig's `fsdp` and `fsdp_config`, and accelerate's ParallelismConfig
for a shard group of one node. Apart from build.py so the config's tests read it without importing TRL."""

import os

from omegaconf import DictConfig

from grpo_exp.core import plain

# fsdp/ keys that are grpo_exp's own; every other key is one of transformers' fsdp_config keys, verbatim.
FSDP_OWN_KEYS = ("name", "enabled", "shard_group")


def fsdp_fields(cfg: DictConfig) -> dict:
    """GRPOConfig's `fsdp` / `fsdp_config` for the fsdp group ({} without FSDP), and for shard_group=node
    accelerate's ParallelismConfig: shard within a node (torchrun's LOCAL_WORLD_SIZE ranks), replicate across."""
    if not cfg.fsdp.enabled:
        return {}
    config = {
        k: v for k, v in plain.mapping(cfg.fsdp, resolve=False).items() if k not in FSDP_OWN_KEYS and v is not None
    }
    fields = {"fsdp": True, "fsdp_config": config}
    world, local = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if cfg.fsdp.shard_group == "node" and world > local:
        from accelerate.parallelism_config import ParallelismConfig

        fields["parallelism_config"] = ParallelismConfig(dp_replicate_size=world // local, dp_shard_size=local)
    return fields
