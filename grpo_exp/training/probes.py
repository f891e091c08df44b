"""What memory this process holds, read from every source the machine has, and the memory cap.

Backends are feature-detected: host RSS peak (Linux VmHWM, reset through /proc/self/clear_refs; psutil
RSS where that is not allowed), the CUDA caching allocator (max allocated / reserved / active, alloc
retries, OOMs), and NVML's whole-device used memory (what nvidia-smi shows: also vLLM, NCCL, the CUDA
context). NVML keeps no peak: it is sampled at phase boundaries. `ModelStateMeter` counts the bytes of
parameters, gradients and optimizer states themselves (what calibrates the planner).
"""

import os

from grpo_exp import GIB, visible_devices
from grpo_exp.core import metrics


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


class ModelStateMeter:
    """Real bytes of parameters, gradients and optimizer state on this rank, read right after each
    optimizer step (a global torch optimizer post-hook, so it also sees the torch Adam that
    DeepSpeed runs on its fp32 partitions, while their gradients still exist). Storages are
    counted once, so views into DeepSpeed's flat buffers are not double counted; FSDP2's DTensors count
    their local shard."""

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
            if hasattr(tensor, "to_local"):  # an FSDP2 DTensor: this rank's shard
                tensor = tensor.to_local()
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
        out = {metrics.measured(k): v / GIB for k, v in self.peak.items()}
        out[metrics.measured("model_states")] = sum(self.peak.values()) / GIB
        return out
