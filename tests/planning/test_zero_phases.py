"""When ZeRO's gradient copies live, measured on real DeepSpeed ranks and planned alike: backward holds the 16-bit
gradients reduced into this rank's partition; the fp32 copy the optimizer steps on exists only inside step()
(stage 1/2: the whole partition; stage 3: one sub-group at a time), after backward freed the activations. DeepSpeed
runs step() inside accelerate's backward, so the train phase is the larger of backward (no fp32 copy) and the step
(with it), and the optimizer phase holds the resident states only (the H200's ZeRO-2 record measured just that)."""

import json
import subprocess
import sys

import pytest

from grpo_exp.models.model_info import ARCH_KEYS
from tests.helpers import CONF, compose_cfg, planned

GIB = 2**30


def plan(*overrides: str) -> dict:
    return planned("model.dtype=bfloat16", *overrides).memory.train


def _with_and_without_copy(x, monkeypatch):
    from grpo_exp.planning import memory

    with_copy = memory.estimate_train(x)
    states = memory.model_states
    with monkeypatch.context() as patched:
        patched.setattr(memory, "model_states", lambda x: {**states(x), "fp32_gradients": 0.0})
        without = memory.estimate_train(x)
    return with_copy, without


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_fp32_gradients_live_in_the_step_never_in_backward(stage, monkeypatch):
    x = planned("model.dtype=bfloat16", f"deepspeed=zero{stage}", "trainer.per_device_train_batch_size=64").inputs
    with_copy, without = _with_and_without_copy(x, monkeypatch)
    fp32 = with_copy.components["fp32_gradients"]
    assert fp32 == pytest.approx(4 * x.params / x.world_size)  # the whole fp32 partition (stage 3: one sub-group)
    assert with_copy.phases["train"] == without.phases["train"]  # backward is the larger: it never holds the copy
    assert with_copy.phases["optimizer"] == without.phases["optimizer"]  # the resident states only
    c = with_copy.components
    resident = c["weights"] + c["optimizer"] + c["reference_model"]
    assert with_copy.phases["optimizer"] == pytest.approx(resident + c["runtime"] + c["allocator_reserve"])
    assert plan(f"deepspeed=zero{stage}", "model.dtype=float32")["components_gib"]["fp32_gradients"] == 0


def test_a_step_larger_than_backward_is_the_train_phase(monkeypatch):
    shape = ("model=qwen0.5b", "topology=1x1", "trainer.per_device_train_batch_size=2", "trainer.num_generations=2")
    x = planned("deepspeed=zero2", *shape).inputs  # checkpointed activations of one sequence: a small backward
    with_copy, without = _with_and_without_copy(x, monkeypatch)
    assert with_copy.phases["train"] > without.phases["train"]  # the step's fp32 copy outgrows backward's tensors


def test_sub_group_size_moves_only_the_step():
    shape = ("model=qwen1.5b", "topology=1x2", "deepspeed=zero3", "vllm=off", "topology.gpu_memory_gib=80")
    big = plan(*shape, "trainer.activation_checkpointing=false")
    small = plan(
        *shape, "trainer.activation_checkpointing=false", "++deepspeed.zero_optimization.sub_group_size=10000000"
    )
    assert small["phases_gib"] == pytest.approx(big["phases_gib"])  # backward, far larger, is the train phase
    assert big["components_gib"]["fp32_gradients"] - small["components_gib"]["fp32_gradients"] > 2.0
    # with checkpointing the step outgrows backward: the smaller sub-group lowers the train phase
    stepping = plan(*shape)
    smaller = plan(*shape, "++deepspeed.zero_optimization.sub_group_size=10000000")
    assert stepping["phases_gib"]["train"] > smaller["phases_gib"]["train"]

    def resident(p):  # the optimizer phase less the reserve (a fraction of the largest phase)
        return p["phases_gib"]["optimizer"] - p["components_gib"]["allocator_reserve"]

    assert resident(stepping) == pytest.approx(resident(smaller))


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
