"""Reward functions that break the run's vLLM server from inside a training process, for the lane's tests of a
server that dies or stalls (tests/vllm/test_server_faults.py). The server is the driver's child; the training
process (one rank, no torchrun) is too, so the server is found among its parent's children."""

import os
import signal

import psutil

_calls = {"n": 0}


def _server_processes() -> list[psutil.Process]:
    driver = psutil.Process(os.getppid())
    return [p for p in driver.children(recursive=True) if "vllm.entrypoints.cli.main" in " ".join(p.cmdline())]


def _at_second_step(sig: int, completions) -> list[float]:
    _calls["n"] += 1
    if _calls["n"] == 2:  # after one full step: the server has generated and been synced once
        for proc in _server_processes():
            proc.send_signal(sig)
    return [0.0] * len(completions)


def kill_server(completions, **kwargs) -> list[float]:
    """SIGKILL the server at the second step's reward: it dies while training runs."""
    return _at_second_step(signal.SIGKILL, completions)


def stop_server(completions, **kwargs) -> list[float]:
    """SIGSTOP the server at the second step's reward: alive, answering nothing (the next weight sync waits)."""
    return _at_second_step(signal.SIGSTOP, completions)
