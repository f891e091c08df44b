"""The vLLM server of `vllm=server` runs: `trl vllm-serve` argv from the same config the trainer
reads (so model, TP size, memory fraction and context length cannot drift), a health wait with
a deadline, and a stop. Started by the launcher in the run's process group, on the GPUs the
plan reserved.
"""

import shutil
import sys
import time
import urllib.error
import urllib.request

from omegaconf import DictConfig

from grpo_exp.planning import placement


class ServerNotReady(RuntimeError):
    pass


def serve_command(cfg: DictConfig, gpus: int) -> list[str]:
    """`trl vllm-serve` on `gpus` GPUs: engines of vllm.tensor_parallel_size, data parallel over the rest."""
    v = cfg.vllm
    standin = placement.standin_server()
    trl = [*standin] if standin else (shutil.which("trl") or f"{sys.executable} -m trl").split()
    argv = [
        *trl,
        "vllm-serve",
        f"--model={cfg.model.name_or_path}",
        f"--tensor_parallel_size={v.tensor_parallel_size}",
        f"--data_parallel_size={max(1, gpus // v.tensor_parallel_size)}",
        f"--gpu_memory_utilization={v.gpu_memory_utilization}",
        f"--dtype={cfg.model.dtype}",
        f"--host={bind_address(cfg)}",
        f"--port={v.server_port}",
    ]
    if v.max_model_length is not None:
        argv.append(f"--max_model_len={v.max_model_length}")
    return argv


def bind_address(cfg: DictConfig) -> str:
    """Where the server listens: TRL's server has no authentication, so only where trainers are.
    Loopback when they all run on its node; a dedicated serving node its own address (the one the
    trainers are given, vllm.server_host); else node 0's address on the cluster network."""
    if cfg.vllm.server_bind is not None:
        return cfg.vllm.server_bind
    if cfg.vllm.nodes:
        return cfg.vllm.server_host or "<vllm.server_host: the serving node's address>"
    return "127.0.0.1" if cfg.topology.nnodes == 1 else str(cfg.topology.master_addr)


def health_url(cfg: DictConfig) -> str:
    """Checked from node 0, where the plan puts the server."""
    return f"http://{cfg.vllm.server_host or '127.0.0.1'}:{cfg.vllm.server_port}/health"


def wait_healthy(url: str, timeout_s: float, is_alive=lambda: True, poll_s: float = 1.0) -> float:
    """Block until `url` answers 200; returns the seconds waited. Raises ServerNotReady with the
    reason (died, or the deadline passed) instead of letting training hang on a dead server."""
    started = time.time()
    last_error = "no answer yet"
    while time.time() - started < timeout_s:
        if not is_alive():
            raise ServerNotReady(f"the vLLM server exited before answering {url}; see train.log")
        try:
            with urllib.request.urlopen(url, timeout=poll_s) as response:
                if response.status == 200:
                    return time.time() - started
                last_error = f"HTTP {response.status}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(getattr(exc, "reason", exc))
        time.sleep(poll_s)
    raise ServerNotReady(
        f"the vLLM server did not answer {url} within vllm.server_timeout={timeout_s:g}s ({last_error}); "
        "raise vllm.server_timeout for large models, or check the server's log in train.log"
    )
