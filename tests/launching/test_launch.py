"""This node's share: the GPUs it sees, the environment its processes get."""

import pytest

from grpo_exp.launching import launch
from tests.helpers import compose_cfg


@pytest.mark.parametrize("visible,count", [("", 0), ("0", 1), ("0,1,3", 3), ("-1", 0)])
def test_visible_gpus_honours_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert launch.visible_gpus() == count


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
