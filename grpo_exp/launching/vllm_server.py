"""The vLLM server of `vllm=server` runs: `vllm serve` as TRL starts it, from the same config the trainer
reads (so model, TP size, memory fraction and context length cannot drift), a health wait with
a deadline, and a stop. Started by the launcher in the run's process group, on the GPUs the
plan reserved.
"""

import threading
import time

from omegaconf import DictConfig

from grpo_exp.core.outcome import LaunchFailed
from grpo_exp.planning.placement import bind_address, serve_command

__all__ = [
    "ServerDied",
    "ServerNotReady",
    "ServerMemory",
    "RemoteWatch",
    "bind_address",
    "serve_command",
    "health_url",
    "wait_healthy",
]


class ServerNotReady(LaunchFailed):
    """The vLLM server never answered /health (it exited, or vllm.server_timeout passed)."""


class ServerDied(LaunchFailed):
    """The vLLM server exited while training ran: the trainers would wait on it until their timeouts."""


def with_log_tail(message: str, tail: list[str]) -> str:
    """`message` with the server's last log lines, which say why it ended."""
    return message + (":\n  " + "\n  ".join(line.rstrip() for line in tail) if tail else "; see train.log")


class ServerMemory:
    """The peak resident memory of the server's processes together (the API server, the engine core, its workers):
    psutil over the process tree, sampled every `interval_s` on a thread until stop()."""

    def __init__(self, pid: int, interval_s: float = 0.5):
        import psutil

        self.root, self.peak_bytes = psutil.Process(pid), 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval_s,), daemon=True)
        self._thread.start()

    def _sample(self, interval_s: float) -> None:
        import psutil

        while not self._stopped.wait(interval_s):
            try:
                tree = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:  # the server is gone
                return
            total = 0
            for proc in tree:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # a process that ended between the listing and the read
                    pass
            self.peak_bytes = max(self.peak_bytes, total)

    def stop(self) -> float:
        """Stop sampling; the peak in bytes."""
        self._stopped.set()
        self._thread.join(timeout=5)
        return self.peak_bytes


def health_url(cfg: DictConfig) -> str:
    """Checked from node 0, where the plan puts the server."""
    return f"http://{cfg.vllm.server_host or '127.0.0.1'}:{cfg.vllm.server_port}/health"


def answers(url: str, timeout_s: float) -> str | None:
    """None where `url` answers 200 within `timeout_s`; else why not."""
    # here, not at the top: urllib.request brings http.client, email and ssl (~30 ms), and a plan never asks
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))


class RemoteWatch:
    """A serving node's server, watched from node 0's driver while training runs: a server that dies or a link that
    goes away misses its /health checks, and the run ends naming it (ServerDied) within MISSES x EVERY_S seconds,
    instead of a weight sync or a generation that waits on it until watchdog.stall_s."""

    EVERY_S = 5.0
    MISSES = 3

    def __init__(self, url: str):
        self.url, self.misses = url, 0
        self.why: str | None = None
        self.next_check = time.monotonic() + self.EVERY_S

    def check(self) -> None:
        if time.monotonic() < self.next_check:
            return
        self.why = answers(self.url, timeout_s=self.EVERY_S / 2)
        self.misses = 0 if self.why is None else self.misses + 1
        self.next_check = time.monotonic() + self.EVERY_S
        if self.misses >= self.MISSES:
            raise ServerDied(
                f"the vLLM server on the serving node stopped answering {self.url} while training ran: "
                f"{self.misses} checks in a row over {self.misses * self.EVERY_S:.0f} s ({self.why})"
            )


def wait_healthy(url: str, timeout_s: float, is_alive=lambda: True, poll_s: float = 1.0, log_tail=list) -> float:
    """Block until `url` answers 200; returns the seconds waited. Raises ServerNotReady with the
    reason (died, or the deadline passed) and the server's last log lines (`log_tail()`) instead of letting
    training hang on a dead server."""
    started = time.time()
    last_error = "no answer yet"
    while time.time() - started < timeout_s:
        if not is_alive():
            raise ServerNotReady(with_log_tail(f"the vLLM server exited before answering {url}", log_tail()))
        why = answers(url, timeout_s=poll_s)
        if why is None:
            return time.time() - started
        last_error = why
        time.sleep(poll_s)
    raise ServerNotReady(
        with_log_tail(
            f"the vLLM server did not answer {url} within vllm.server_timeout={timeout_s:g}s ({last_error}); "
            "raise vllm.server_timeout for large models. Its last lines",
            log_tail(),
        )
    )
