"""The cross-rank guards a training rank runs: checks that turn multi-node hangs into fast, named failures.

- Fingerprints: right after rendezvous, before the model loads, every rank shares its fingerprint
  (config/fingerprint.py: resolved config, processes per node, world size, package versions); if nodes disagree
  (a different override, NPROC_PER_NODE, use_vllm, a different trl), every rank stops at once with a message
  naming the node ranks and keys, instead of hanging at the first mismatched collective.
- Placement guard: a training process must use one GPU (no nn.DataParallel) and see no vLLM GPU.
- Stall watchdog: faulthandler's C-level timer, re-armed at every finished step; when it fires it
  writes every thread's Python stack to <run dir>/stacks/rank<N>.txt and ends the process, even
  if the main thread is stuck inside a collective.
"""

import faulthandler
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.config.fingerprint import differences, fingerprint
from grpo_exp.core import rundir
from grpo_exp.core.outcome import Mismatch


def check_across_ranks(cfg: DictConfig) -> list[str]:
    """Exchange fingerprints over the (already initialized) process group; raise Mismatch on every
    rank if they differ. procs_per_node may differ by design (7+8), so it is compared only in
    symmetric topologies. Each rank's host name, by rank (the run's facts: which machines ran it)."""
    import socket

    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (fingerprint(cfg), socket.gethostname()))
    prints, hosts = [p for p, _ in gathered], [h for _, h in gathered]
    if not cfg.topology.symmetric and cfg.vllm.mode == "server":
        for p in prints:
            p["facts"].pop("procs_per_node")
    problems = differences(prints)
    if problems:
        raise Mismatch(
            "nodes of this run disagree; fix the launch so every node runs the same config:\n  " + "\n  ".join(problems)
        )
    return hosts


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
            f"CUDA_VISIBLE_DEVICES={','.join(visible or [])} includes GPU(s) {sorted(overlap)} reserved for the vLLM "
            "server"
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
        if self.file is not None and self.stall_s is not None:
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
