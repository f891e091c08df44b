"""Checks that turn multi-node hangs into fast, named failures.

- Fingerprints: right after rendezvous, before the model loads, every rank shares its resolved
  config, processes per node, world size and package versions; if nodes disagree (a different
  override, NPROC_PER_NODE, use_vllm, a different trl), every rank stops at once with a message
  naming the node ranks and keys, instead of hanging at the first mismatched collective.
- Placement guard: a training process must use one GPU (no nn.DataParallel) and see no vLLM GPU.
- Stall watchdog: faulthandler's C-level timer, re-armed at every finished step; when it fires it
  writes every thread's Python stack to <run dir>/stacks/rank<N>.txt and ends the process, even
  if the main thread is stuck inside a collective.
"""

import faulthandler
import importlib.metadata
import os
import platform
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp.core import rundir
from grpo_exp.core.outcome import Mismatch

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


def check_across_ranks(cfg: DictConfig) -> None:
    """Exchange fingerprints over the (already initialized) process group; raise Mismatch on every
    rank if they differ. procs_per_node may differ by design (7+8), so it is compared only in
    symmetric topologies."""
    import torch.distributed as dist

    prints: list = [None] * dist.get_world_size()
    dist.all_gather_object(prints, fingerprint(cfg))
    if not cfg.topology.symmetric and cfg.vllm.mode == "server":
        for p in prints:
            p["facts"].pop("procs_per_node")
    problems = differences(prints)
    if problems:
        raise Mismatch(
            "nodes of this run disagree; fix the launch so every node runs the same config:\n  " + "\n  ".join(problems)
        )


def placement_problems(visible: list[str] | None, vllm_gpus: str | None, n_gpu: int) -> list[str]:
    """The startup guard: what is wrong with this training process's view of the GPUs."""
    problems = []
    if n_gpu > 1:
        problems.append(
            f"this process drives {n_gpu} GPUs: transformers would wrap the model in nn.DataParallel; launch one "
            "process per GPU"
        )
    reserved = {g for g in (vllm_gpus or "").split(",") if g}
    overlap = reserved & set(visible or [])
    if overlap:
        problems.append(
            f"CUDA_VISIBLE_DEVICES={','.join(visible)} includes GPU(s) {sorted(overlap)} reserved for the vLLM server"
        )
    return problems


class StallWatchdog:
    """No finished step for `stall_s`: dump all stacks to stacks/rank<N>.txt and exit."""

    def __init__(self, run_dir: Path, rank: int, stall_s: float | None):
        self.stall_s = stall_s
        self.file = None
        if stall_s:
            folder = Path(run_dir) / rundir.STACKS
            folder.mkdir(exist_ok=True)
            self.file = open(folder / f"rank{rank}.txt", "w")

    def arm(self) -> None:
        if self.file is not None:
            faulthandler.dump_traceback_later(self.stall_s, repeat=False, file=self.file, exit=True)

    def disarm(self) -> None:
        if self.file is not None:
            faulthandler.cancel_dump_traceback_later()

    def close(self) -> None:
        self.disarm()
        if self.file is not None:
            path = Path(self.file.name)
            self.file.close()
            if path.stat().st_size == 0:  # never fired: leave no empty file behind
                path.unlink()
                try:
                    path.parent.rmdir()  # fails while another rank's file is still there: fine
                except OSError:
                    pass
