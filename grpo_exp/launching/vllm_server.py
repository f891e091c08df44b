"""The vLLM server of `vllm=server` runs: `vllm serve` as TRL starts it, from the same config the trainer
reads (so model, TP size, memory fraction and context length cannot drift), a health wait with
a deadline, and a stop. Started by the launcher in the run's process group, on the GPUs the
plan reserved.
"""

import time
import urllib.error
import urllib.request

from omegaconf import DictConfig

from grpo_exp.core.outcome import LaunchFailed
from grpo_exp.planning.placement import bind_address, serve_command

__all__ = ["ServerNotReady", "bind_address", "serve_command", "health_url", "wait_healthy"]


class ServerNotReady(LaunchFailed):
    """The vLLM server never answered /health (it exited, or vllm.server_timeout passed)."""


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
