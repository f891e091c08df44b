"""This node's share: the GPUs it sees, the environment its processes get."""

import pytest

from grpo_exp.core import gpus
from grpo_exp.launching import launch
from tests.helpers import compose_cfg


@pytest.mark.parametrize("visible,count", [("", 0), ("0", 1), ("0,1,3", 3), ("-1", 0)])
def test_visible_gpus_honours_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpus.count() == count


def test_default_run_needs_no_hub_and_real_ones_do():
    assert not launch.needs_hub(compose_cfg())
    assert launch.process_env(compose_cfg(), {})["HF_HUB_OFFLINE"] == "1"
    assert launch.needs_hub(compose_cfg("model=qwen7b"))
    assert launch.needs_hub(compose_cfg("data=gsm8k"))
    assert not launch.needs_hub(compose_cfg("data=gsm8k", "data.path=tests/fixtures/gsm8k_sample.jsonl"))


@pytest.mark.parametrize(
    "value, devices",
    [(None, None), ("", []), ("-1", []), ("0, 2", ["0", "2"]), ("GPU-a1b2,GPU-c3d4", ["GPU-a1b2", "GPU-c3d4"])],
)
def test_cuda_visible_devices_has_one_parser(monkeypatch, value, devices):
    from grpo_exp import visible_devices

    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert visible_devices() == devices


def test_a_second_stop_signal_while_the_run_winds_down_waits_for_it(caplog):
    """The first stop signal ends the run like Ctrl-C; every one after it (a scheduler's SIGTERM, then a user's Ctrl-C)
    is said and waits while the ranks save and the record is concluded, until the driver exits: no traceback, no
    summary.json left `running`. The handlers the launcher replaced stay replaced once a stop came."""
    import os
    import signal

    before = {sig: signal.getsignal(sig) for sig in launch.STOP_SIGNALS}
    previous = launch.arm_stop_signals()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's: its handler runs as the call returns
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the user's Ctrl-C, another TERM, a closed terminal
            os.kill(os.getpid(), sig)
        launch.disarm(previous)
        assert signal.getsignal(signal.SIGTERM) is launch._already_stopping  # until the driver exits
        assert [r.message.split(":")[0] for r in caplog.records if "already stopping" in r.message] == [
            "SIGINT",
            "SIGTERM",
            "SIGHUP",
        ]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_without_a_stop_signal_the_launchers_handlers_are_put_back():
    import signal

    before = signal.getsignal(signal.SIGTERM)
    launch.disarm(launch.arm_stop_signals())
    assert signal.getsignal(signal.SIGTERM) is before
