"""Peak memory per phase, on every rank, aggregated over ranks; OOMs classified as results.

How it works
- `MemoryProbe` reads this process's peaks and resets them. Backends are feature-detected:
  host RSS peak (Linux VmHWM, reset through /proc/self/clear_refs; psutil RSS where that is not
  allowed), the CUDA caching allocator (max allocated / reserved / active, alloc retries, OOMs),
  and NVML's whole-device used memory (what nvidia-smi shows: also vLLM, NCCL, the CUDA context).
- `PhaseMemory` attributes every peak to the innermost running phase: entering or leaving a
  phase closes the current segment (read peaks, charge them to the phase on top, reset). Nested
  phases (generate inside train_step) therefore never hide each other's spikes.
- `instrument(trainer)` wraps GRPOTrainer's methods in phases and its `log()` so that every
  logging step gathers each rank's window over torch.distributed and adds
  `memory/<phase>/<stat>_gib` (max over ranks) with `_mean`, `_min` and `_argmax_rank`.

GiB = 2**30 bytes. NVML used memory is sampled at phase boundaries (NVML keeps no peak).
"""

import os
import re
import time
from collections import defaultdict
from contextlib import contextmanager

from grpo_exp import GIB, PHASES, visible_devices

VLLM = "vllm"  # the vLLM server's GPUs (server mode), read through NVML by rank 0: role and key

BYTE_STATS = ("host_rss_max", "alloc_max", "reserved_max", "active_max", "device_used_max")
COUNT_STATS = ("alloc_retries", "ooms")  # cumulative allocator counters, logged as memory/<stat>


class MemoryProbe:
    """This process's memory peaks since the last reset, in bytes."""

    def __init__(self):
        import torch

        self._torch = torch
        self.cuda = torch.cuda.is_available()
        self._nvml = _nvml_handle() if self.cuda else None
        self.host = HostPeak()

    @property
    def host_peak_resettable(self) -> bool:
        return self.host.available

    def reset(self) -> None:
        if self.cuda:
            self._torch.cuda.reset_peak_memory_stats()
        self.host.reset()

    def read(self) -> dict[str, float]:
        stats = {"host_rss_max": self.host.read()}
        if self.cuda:
            s = self._torch.cuda.memory_stats()
            stats.update(
                alloc_max=s.get("allocated_bytes.all.peak", 0),
                reserved_max=s.get("reserved_bytes.all.peak", 0),
                active_max=s.get("active_bytes.all.peak", 0),
                alloc_retries=s.get("num_alloc_retries", 0),
                ooms=s.get("num_ooms", 0),
            )
        if self._nvml is not None:
            import pynvml

            stats["device_used_max"] = pynvml.nvmlDeviceGetMemoryInfo(self._nvml).used
        return stats

    def snapshot(self) -> str:
        """A readable state of memory for an OOM report."""
        if self.cuda:
            return self._torch.cuda.memory_summary()
        with open("/proc/self/status") as f:
            return "".join(line for line in f if line.startswith(("VmPeak", "VmSize", "VmHWM", "VmRSS", "VmData")))


def _nvml_handle(physical_index: int | None = None):
    try:
        import pynvml

        pynvml.nvmlInit()
        if physical_index is None:
            index = int(os.environ.get("LOCAL_RANK", "0"))
            visible = visible_devices()
            if visible:  # NVML numbers physical devices; CUDA_VISIBLE_DEVICES renumbers them
                index = int(visible[index])
            physical_index = index
        return pynvml.nvmlDeviceGetHandleByIndex(physical_index)
    except Exception:  # no NVML or a UUID-style CUDA_VISIBLE_DEVICES: skip the device-wide stat
        return None


class VllmServerProbe:
    """NVML used memory of the GPUs the plan gave the vLLM server (GRPO_EXP_VLLM_GPUS on node 0).
    The server is another process: NVML is the only view of it. None where there is no NVML."""

    def __init__(self, handles: list):
        self.handles = handles

    @classmethod
    def from_env(cls) -> "VllmServerProbe | None":
        indices = [int(i) for i in os.environ.get("GRPO_EXP_VLLM_GPUS", "").split(",") if i]
        handles = [h for h in (_nvml_handle(i) for i in indices) if h is not None]
        return cls(handles) if handles else None

    def read(self) -> dict[str, float]:
        import pynvml

        return {"device_used_max": max(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)}


class HostPeak:
    """This process's peak RSS (VmHWM), resettable through /proc/self/clear_refs (Linux >= 4.0).
    Both files stay open, so a phase boundary costs one write and one pread."""

    def __init__(self):
        try:
            self._clear = os.open("/proc/self/clear_refs", os.O_WRONLY)
            os.write(self._clear, b"5")
            self._status = os.open("/proc/self/status", os.O_RDONLY)
            self.available = True
        except OSError:  # not Linux, or a sandbox that refuses: fall back to sampling RSS
            self.available = False

    def reset(self) -> None:
        if self.available:
            os.write(self._clear, b"5")

    def read(self) -> int:
        if not self.available:
            return _host_rss()
        status = os.pread(self._status, 16384, 0)
        start = status.find(b"VmHWM:")
        return int(status[start + 6 : status.index(b"kB", start)]) * 1024


def _host_rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class PhaseMemory:
    """Per-phase peaks of this process for the current logging window, and the whole run's."""

    def __init__(self, probe: MemoryProbe, vllm_probe: VllmServerProbe | None = None):
        self.probe = probe
        self.vllm_probe = vllm_probe
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

    def exit(self, name: str) -> None:
        self._close_segment()
        if self.stack and self.stack[-1] == name:
            self.stack.pop()

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


def aggregate(per_rank: list[dict[str, dict[str, float]]]) -> dict[str, float]:
    """Rank windows -> flat metrics: max over ranks under the plain name, plus mean/min/argmax."""
    out: dict[str, float] = {}
    phases = sorted({p for window in per_rank for p in window})
    for phase in phases:
        for stat in BYTE_STATS:
            values = [(w[phase][stat], rank) for rank, w in enumerate(per_rank) if stat in w.get(phase, {})]
            if not values:
                continue
            peak, argmax = max(values)
            name = f"memory/{phase}/{stat}_gib"
            out[name] = peak / GIB
            out[f"{name}_mean"] = sum(v for v, _ in values) / len(values) / GIB
            out[f"{name}_min"] = min(v for v, _ in values) / GIB
            out[f"{name}_argmax_rank"] = argmax
    for stat in COUNT_STATS:
        counts = [w[p][stat] for w in per_rank for p in w if stat in w[p]]
        if counts:
            out[f"memory/{stat}"] = max(counts)
    return out


def run_peaks(metrics: dict[str, float], peaks: dict[str, float]) -> dict[str, float]:
    """Fold one logging step's memory metrics into the whole run's maxima (summary keys): per role,
    memory/peak/<role>/<stat>_gib, and per phase, memory/peak_phase/<phase>/<stat>_gib."""
    for key, value in metrics.items():
        match = re.fullmatch(r"memory/([a-z_]+)/(\w+_gib)", key)
        if match:
            role = VLLM if match.group(1) == VLLM else "train"
            for name in (
                f"memory/peak/{role}/{match.group(2)}",
                f"memory/peak_phase/{match.group(1)}/{match.group(2)}",
            ):
                peaks[name] = max(peaks.get(name, value), value)
    return peaks


_SLOTS = [(phase, stat) for phase in (*PHASES, VLLM) for stat in (*BYTE_STATS, *COUNT_STATS)]


def gather(window: dict) -> list[dict]:
    """Every rank's window, on every rank (a collective: all ranks must call it). One fixed-layout
    float64 tensor per rank (NaN = not measured): a single all_gather, no pickling."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [window]
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    mine = torch.tensor([window.get(p, {}).get(s, float("nan")) for p, s in _SLOTS], dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    windows = []
    for values in everyone:
        rank_window: dict = defaultdict(dict)
        for (phase, stat), value in zip(_SLOTS, values.tolist(), strict=True):
            if value == value:  # not NaN
                rank_window[phase][stat] = value
        windows.append(dict(rank_window))
    return windows


# The GRPOTrainer methods (trl 1.16) each phase is measured around: the one place grpo_exp relies on
# TRL's internals. training_step is forward + backward (generation runs inside it, through
# _prepare_inputs); _get_per_token_logps_and_entropies is scoring without gradients (old/reference
# log-probs) and part of training with them. The optimizer step is bracketed by callbacks (under
# DeepSpeed it runs inside backward: `train`); weight sync wraps trainer.vllm_generation.sync_weights.
PHASE_HOOKS = {
    "training_step": "train",
    "_prepare_inputs": "generate",  # generation-batch bookkeeping around the phases below
    "_generate": "generate",
    "_calculate_rewards": "reward",
    "_get_per_token_logps_and_entropies": "score or train",
}


def missing_hooks(trainer_class) -> list[str]:
    """The PHASE_HOOKS methods the installed trl's GRPOTrainer lacks (a renamed private method)."""
    return [name for name in PHASE_HOOKS if not callable(getattr(trainer_class, name, None))]


def instrument(trainer, phases: PhaseMemory) -> dict[str, float]:
    """Wrap the trainer's PHASE_HOOKS and log(); returns the dict that accumulates run peaks."""
    import torch
    from transformers import TrainerCallback

    missing = missing_hooks(type(trainer))
    if missing:
        raise RuntimeError(
            f"memory telemetry: this trl's GRPOTrainer has no {', '.join(missing)} (renamed in an upgrade?); "
            "memory.telemetry=false runs without it, or update telemetry.PHASE_HOOKS"
        )

    def wrap(obj, method: str, phase_name):
        original = getattr(obj, method)

        def wrapped(*args, **kwargs):
            name = phase_name() if callable(phase_name) else phase_name
            with phases.phase(name):
                return original(*args, **kwargs)

        setattr(obj, method, wrapped)

    for method, phase in PHASE_HOOKS.items():
        wrap(
            trainer,
            method,
            (lambda: "train" if torch.is_grad_enabled() else "score") if phase == "score or train" else phase,
        )
    if getattr(trainer, "vllm_generation", None) is not None:
        wrap(trainer.vllm_generation, "sync_weights", "weight_sync")

    class OptimizerPhase(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            phases.enter("optimizer")

        def on_optimizer_step(self, args, state, control, **kwargs):
            phases.exit("optimizer")

    trainer.add_callback(OptimizerPhase())

    peaks: dict[str, float] = {}
    original_log = trainer.log

    def log(logs: dict, *args, **kwargs):
        # Called on every rank at each logging step (Trainer gathers the loss just before), so the
        # gather below is safe; callbacks (metrics.jsonl, W&B) then see memory/* with the rest.
        started = time.perf_counter()
        memory = aggregate(gather(phases.take_window()))
        logs.update(memory)
        run_peaks(memory, peaks)
        phases.overhead_s += time.perf_counter() - started
        return original_log(logs, *args, **kwargs)

    trainer.log = log
    return peaks


def throughput(phases: PhaseMemory, final_logs: dict) -> dict[str, float]:
    """tokens/s over the run (TRL's cumulative num_tokens / train_runtime) and where time went."""
    out = {"telemetry/overhead_s": phases.overhead_s}
    runtime, tokens = final_logs.get("train_runtime"), final_logs.get("num_tokens")
    if runtime:
        out["telemetry/overhead_share"] = phases.overhead_s / runtime  # rank 0's own measuring time
    if runtime and tokens:
        out["throughput/tokens_per_s"] = tokens / runtime
    total = sum(phases.seconds.values())
    for phase, seconds in phases.seconds.items():
        out[f"time/{phase}_s"] = seconds
        if total:
            out[f"time/{phase}_share"] = seconds / total
    return out


# --- OOM as a result ------------------------------------------------------------------------


def apply_memory_limit(limit_gib: float | None) -> None:
    """Cap this rank's memory so OOM handling can be rehearsed: CUDA via the allocator's
    per-process fraction, host via RLIMIT_DATA (heap + anonymous mappings the process may hold)."""
    if limit_gib is None:
        return
    import resource

    import torch

    if torch.cuda.is_available():
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit_gib * GIB / total))
    else:
        limit = int(limit_gib * GIB)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))


# --- model-state bytes, measured (calibrates the planner) --------------------------------------


class ModelStateMeter:
    """Real bytes of parameters, gradients and optimizer state on this rank, read right after each
    optimizer step (a global torch optimizer post-hook, so it also sees the torch Adam that
    DeepSpeed runs on its fp32 partitions, while their gradients still exist). Storages are
    counted once, so views into DeepSpeed's flat buffers are not double counted."""

    STEPS = 3  # the states reach their size at the first step; a few steps are enough

    def __init__(self, model):
        self.model = model
        self.peak: dict[str, int] = {}
        self._handle = None
        self._measured = 0

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def hook(optimizer, args, kwargs):
            if self._measured < self.STEPS:
                self._measured += 1
                self._measure(optimizer)

        self._handle = register_optimizer_step_post_hook(hook)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()

    def _measure(self, optimizer) -> None:
        seen: set[int] = set()

        def nbytes(tensor) -> int:
            if tensor is None:
                return 0
            storage = tensor.untyped_storage()
            if storage.nbytes() == 0 or storage.data_ptr() in seen:
                return 0
            seen.add(storage.data_ptr())
            return storage.nbytes()

        params = list(self.model.parameters())
        weights = sum(nbytes(getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p) for p in params)
        grads = sum(nbytes(p.grad) for p in params)
        opt_params = [p for group in optimizer.param_groups for p in group["params"]]
        grads += sum(nbytes(p.grad) for p in opt_params)
        states = sum(nbytes(p) for p in opt_params)  # fp32 master partitions (DeepSpeed); model params are seen already
        states += sum(
            nbytes(v)
            for state in optimizer.state.values()
            for v in state.values()
            if hasattr(v, "untyped_storage") and v.dim() > 0
        )
        for key, value in (("weights", weights), ("gradients", grads), ("optimizer", states)):
            self.peak[key] = max(self.peak.get(key, 0), value)

    def metrics(self) -> dict[str, float]:
        if not self.peak:
            return {}
        out = {f"measured/train/{k}_gib": v / GIB for k, v in self.peak.items()}
        out["measured/train/model_states_gib"] = sum(self.peak.values()) / GIB
        return out
