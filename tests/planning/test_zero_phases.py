"""When ZeRO's gradient copies live, measured on real DeepSpeed ranks and planned alike: backward holds the 16-bit
gradients reduced into this rank's partition; the fp32 copy the optimizer steps on exists only inside step()
(stage 1/2: the whole partition; stage 3: one sub-group at a time), so the plan charges it to the optimizer phase,
never to train."""

import json
import subprocess
import sys

import pytest

from grpo_exp.config.model_info import ARCH_KEYS
from tests.helpers import CONF, compose_cfg, planned

GIB = 2**30


def plan(*overrides: str) -> dict:
    return planned("model.dtype=bfloat16", *overrides).memory["train"]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_fp32_gradients_are_the_optimizer_phases_and_never_trains(stage, monkeypatch):
    from grpo_exp.planning import memory

    found = planned("model.dtype=bfloat16", f"deepspeed=zero{stage}")
    x = found.inputs
    with_copy = memory.estimate_train(x)
    states = memory.model_states
    monkeypatch.setattr(memory, "model_states", lambda x: {**states(x), "fp32_gradients": 0.0})
    without = memory.estimate_train(x)
    fp32 = with_copy.components["fp32_gradients"]
    assert fp32 == pytest.approx(4 * x.params / x.world_size)  # the whole fp32 partition (stage 3: one sub-group)
    assert with_copy.phases["train"] == without.phases["train"]  # backward never holds it
    assert with_copy.phases["optimizer"] == pytest.approx(
        without.phases["optimizer"] + fp32 * (1 + memory.FRAGMENTATION)
    )
    assert plan(f"deepspeed=zero{stage}", "model.dtype=float32")["components_gib"]["fp32_gradients"] == 0


def test_sub_group_size_moves_only_the_optimizer_phase():
    big = plan("model=qwen1.5b", "topology=1x2", "deepspeed=zero3", "vllm=off", "topology.gpu_memory_gib=80")
    small = plan(
        "model=qwen1.5b",
        "topology=1x2",
        "deepspeed=zero3",
        "vllm=off",
        "topology.gpu_memory_gib=80",
        "++deepspeed.zero_optimization.sub_group_size=10000000",
    )
    assert small["phases_gib"]["train"] == pytest.approx(big["phases_gib"]["train"])
    assert (
        big["phases_gib"]["optimizer"] - small["phases_gib"]["optimizer"] > 2.0
    )  # 1.5B / 2 ranks x 4 B, less 1 sub-group


@pytest.mark.slow  # one torchrun of two DeepSpeed ranks, four engines (~15 s)
def test_real_zero_ranks_hold_the_copies_where_the_plan_charges_them(tmp_path):
    tiny = compose_cfg().model
    arch = {k: tiny[k] for k in ARCH_KEYS}
    cases = [[1, 1e9], [2, 1e9], [3, 1e9], [3, 1e4]]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            str(CONF.parent / "tests" / "zero_probe.py"),
            json.dumps(cases),
            json.dumps(arch),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]  # stdout: the cases measured
    found = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [[f["stage"], f["sub_group_size"]] for f in found] == cases
    for f in found:
        planned_train = plan(
            f"deepspeed=zero{f['stage']}", f"++deepspeed.zero_optimization.sub_group_size={f['sub_group_size']}"
        )
        components = planned_train["components_gib"]
        assert f["backward_fp32"] == 0, f  # no fp32 gradient exists in backward
        assert f["step_fp32"] == pytest.approx(components["fp32_gradients"] * GIB, rel=1e-6), f
        if f["stage"] > 1:  # stage 1's full gradients before the reduce are zero1_full_gradients, not seen after it
            assert f["backward_16bit"] == pytest.approx(components["gradients"] * GIB, rel=0.2), (
                f
            )  # + alignment padding
