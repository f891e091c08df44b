"""Peak memory per phase of a GRPO step, on every rank, aggregated over ranks; and where the time went.

`PhaseMemory` attributes every peak to the innermost running phase: entering or leaving a phase closes the
current segment (read the probe's peaks, charge them to the phase on top, reset). Nested phases (generate
inside train_step) therefore never hide each other's spikes. At each logging step every rank's window is
gathered (one all_gather of a fixed-layout tensor) and becomes `memory/<phase>/<stat>_gib`, the maximum
over ranks, with its mean, min and argmax rank (core/metrics.py names them), and the fullest node's host RAM
(its ranks' RSS added up: what the kernel's OOM killer sees).

GiB = 2**30 bytes.
"""

import os
import time
from collections import defaultdict
from contextlib import contextmanager

from grpo_exp import GIB, PHASES
from grpo_exp.core import metrics
from grpo_exp.core.metrics import BYTE_STATS, COUNT_STATS, NODE_RSS, VLLM
from grpo_exp.training.probes import MemoryProbe, VllmServerProbe

PHASE_WIDTH = 16  # the phase file's fixed width: every phase name fits (readers strip the padding)


class PhaseMemory:
    """Per-phase peaks of this process for the current logging window, and the whole run's."""

    def __init__(self, probe: MemoryProbe, vllm_probe: VllmServerProbe | None = None, phase_file=None):
        self.probe = probe
        self.vllm_probe = vllm_probe
        self.phase_file = phase_file  # a Path kept holding the phase last entered, or None
        self._phase_fd: int | None = None
        self._said: str | None = None
        self.stack: list[str] = []
        self.window: dict[str, dict[str, float]] = defaultdict(dict)
        self.failed_phase: str | None = None
        self.seconds: dict[str, float] = defaultdict(float)  # whole run, innermost phase, this rank
        self.overhead_s = 0.0  # time spent measuring (probes + the per-log gather), this rank
        self._segment_start = time.perf_counter()
        probe.reset()

    def _close_segment(self) -> None:
        now = time.perf_counter()
        if self.stack:
            _merge_max(self.window[self.stack[-1]], self.probe.read())
            self.seconds[self.stack[-1]] += now - self._segment_start
        if self.vllm_probe is not None:  # sampled at every phase boundary (NVML keeps no peak)
            _merge_max(self.window[VLLM], self.vllm_probe.read())
        self.probe.reset()
        self._segment_start = time.perf_counter()
        self.overhead_s += self._segment_start - now

    def enter(self, name: str) -> None:
        self._close_segment()
        self.stack.append(name)
        if self.phase_file is not None:  # what a rank the OOM killer takes was doing (launching/oom_killer.py)
            self._say(name)

    def _say(self, name: str) -> None:
        """The phase file holds `name`: one fixed-width write at its start, so a rank killed mid-write (SIGKILL, the
        OOM killer) leaves a whole name behind, never the empty file a truncate-then-write can."""
        if name == self._said:
            return
        if self._phase_fd is None:
            self._phase_fd = os.open(self.phase_file, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(self._phase_fd, name.ljust(PHASE_WIDTH).encode(), 0)
        self._said = name

    def exit(self, name: str) -> None:
        self._close_segment()
        if self.stack and self.stack[-1] == name:
            self.stack.pop()
        if self.stack and self.phase_file is not None:  # back in the phase around it (generation inside train)
            self._say(self.stack[-1])

    @contextmanager
    def phase(self, name: str):
        if self.stack and self.stack[-1] == name:  # e.g. the training forward inside train: no new segment
            yield
            return
        self.enter(name)
        try:
            yield
        except BaseException:
            self.failed_phase = self.failed_phase or name  # the innermost phase that raised
            raise
        finally:
            self.exit(name)

    def take_window(self) -> dict[str, dict[str, float]]:
        self._close_segment()  # charge what the running phase used so far
        window, self.window = dict(self.window), defaultdict(dict)
        return window


def _merge_max(into: dict, stats: dict) -> None:
    for key, value in stats.items():
        into[key] = max(into.get(key, value), value)


def aggregate(per_rank: list[dict[str, dict[str, float]]], nodes: list[int] | None = None) -> dict[str, float]:
    """Rank windows -> flat metrics: max over ranks under the plain name, plus mean/min/argmax; with `nodes`
    (each rank's node), the fullest node's host RAM: its ranks' RSS peaks added up (they peak within one
    phase of one step, which the collectives keep in step), memory/<phase>/node_rss_max_gib."""
    out: dict[str, float] = {}
    for phase in sorted({p for window in per_rank for p in window} - {VLLM}) if nodes else ():
        per_node: dict[int, float] = defaultdict(float)
        for node, window in zip(nodes or [], per_rank, strict=True):
            per_node[node] += window.get(phase, {}).get("host_rss_max", 0.0)
        if any(per_node.values()):
            out[metrics.memory(phase, NODE_RSS)] = max(per_node.values()) / GIB
    phases = sorted({p for window in per_rank for p in window})
    for phase in phases:
        for stat in BYTE_STATS:
            values = [(w[phase][stat], rank) for rank, w in enumerate(per_rank) if stat in w.get(phase, {})]
            if not values:
                continue
            peak, argmax = max(values)
            name = metrics.memory(phase, stat)
            out[name] = peak / GIB
            out[metrics.across_ranks(name, "mean")] = sum(v for v, _ in values) / len(values) / GIB
            out[metrics.across_ranks(name, "min")] = min(v for v, _ in values) / GIB
            out[metrics.across_ranks(name, "argmax_rank")] = argmax
    for stat in COUNT_STATS:
        counts = [w[p][stat] for w in per_rank for p in w if stat in w[p]]
        if counts:
            out[metrics.counter(stat)] = max(counts)
    return out


def run_peaks(step: dict[str, float], peaks: dict[str, float]) -> dict[str, float]:
    """Fold one logging step's memory metrics into the whole run's maxima (summary keys): per role,
    memory/peak/<role>/<stat>_gib, and per phase, memory/peak_phase/<phase>/<stat>_gib."""
    for key, value in step.items():
        match = metrics.MEMORY.fullmatch(key)
        if match:
            phase, stat = match.groups()
            role = VLLM if phase == VLLM else "train"
            for name in (metrics.peak(role, stat), metrics.peak_phase(phase, stat)):
                peaks[name] = max(peaks.get(name, value), value)
    return peaks


_SLOTS = [(phase, stat) for phase in (*PHASES, VLLM) for stat in (*BYTE_STATS, *COUNT_STATS)]


def this_node() -> int:
    """This process's node: torchrun's GROUP_RANK (the node rank of its agent), 0 outside torchrun."""
    import os

    return int(os.environ.get("GROUP_RANK", 0))


def gather(window: dict, node: int = 0) -> tuple[list[dict], list[int]]:
    """Every rank's window and node, on every rank (a collective: all ranks must call it). One fixed-layout
    float64 tensor per rank (the node, then NaN = not measured): a single all_gather, no pickling."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [window], [node]
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    slots = [window.get(p, {}).get(s, float("nan")) for p, s in _SLOTS]
    mine = torch.tensor([float(node), *slots], dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    windows, nodes = [], []
    for values in everyone:
        node_of_rank, *rest = values.tolist()
        rank_window: dict = defaultdict(dict)
        for (phase, stat), value in zip(_SLOTS, rest, strict=True):
            if value == value:  # not NaN
                rank_window[phase][stat] = value
        windows.append(dict(rank_window))
        nodes.append(int(node_of_rank))
    return windows, nodes


def throughput(phases: PhaseMemory, final_logs: dict) -> dict[str, float]:
    """tokens/s over the run (TRL's cumulative num_tokens / train_runtime) and where time went."""
    out = {metrics.OVERHEAD_S: phases.overhead_s}
    runtime, tokens = final_logs.get("train_runtime"), final_logs.get("num_tokens")
    if runtime:
        out[metrics.OVERHEAD_SHARE] = phases.overhead_s / runtime  # rank 0's own measuring time
    if runtime and tokens:
        out[metrics.TOKENS_PER_S] = tokens / runtime
    total = sum(phases.seconds.values())
    for phase, seconds in phases.seconds.items():
        out[metrics.time_s(phase)] = seconds
        if total:
            out[metrics.time_share(phase)] = seconds / total
    return out
