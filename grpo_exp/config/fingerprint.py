"""A run's fingerprint: what must be equal on every node and rank of it (the resolved config, processes per node,
world size, package versions), and the disagreements between fingerprints, one line per key. The ranks exchange
them after rendezvous (training/guards.py); a dedicated serving node compares its config with the training
nodes' (launching/serving.py)."""

import importlib.metadata
import os
import platform

from omegaconf import DictConfig, OmegaConf

# Config keys that legitimately differ between nodes.
NODE_LOCAL_KEYS = {"topology.node_rank"}
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "vllm")


def _flatten(node, prefix: str = "") -> dict:
    flat = {}
    for key, value in node.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def fingerprint(cfg: DictConfig) -> dict:
    """What must be equal on every rank of a run (node-local keys left out)."""
    config = {k: v for k, v in _flatten(OmegaConf.to_container(cfg, resolve=True)).items() if k not in NODE_LOCAL_KEYS}
    return {
        "node_rank": int(os.environ.get("GROUP_RANK", cfg.topology.node_rank)),
        "facts": {
            "procs_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "python": platform.python_version(),
            **{f"version.{p}": _version(p) for p in PACKAGES},
        },
        "config": config,
    }


def differences(prints: list[dict], sections: tuple[str, ...] = ("facts", "config")) -> list[str]:
    """Human-readable disagreements between ranks' fingerprints, one line per key."""
    lines = []
    for section in sections:
        keys = sorted({k for p in prints for k in p[section]})
        for key in keys:
            by_value: dict[str, list[int]] = {}
            for p in prints:
                by_value.setdefault(repr(p[section].get(key, "<missing>")), []).append(p["node_rank"])
            if len(by_value) > 1:
                where = "; ".join(f"node(s) {sorted(set(nodes))}: {value}" for value, nodes in by_value.items())
                lines.append(f"{key} differs between nodes: {where}")
    return lines
