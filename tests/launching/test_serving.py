"""Dedicated vLLM nodes: the plan of TRL's 4+1 layout and its validation. Its launch, two drivers with a real vLLM
server on CPU, is in the vLLM lane (tests/vllm/test_serving_node.py)."""

from pathlib import Path

import pytest

from tests.helpers import check, compose_cfg

LAYOUT = (
    "model=qwen72b",
    "topology=4x8",
    "topology.nnodes=5",
    "deepspeed=zero3",
    "vllm=server",
    "vllm.nodes=1",
    "action=plan",
)


def plan_for(*overrides):
    plan, problems = check(compose_cfg(*overrides), Path("/x"), gpus=0)
    return plan, problems


@pytest.mark.parametrize("tp,engines", [(8, 1), (4, 2), (2, 4)])
def test_the_last_node_serves_with_data_parallel_engines(tp, engines):
    plan, problems = plan_for(*LAYOUT, f"vllm.tensor_parallel_size={tp}")
    assert problems == []
    assert plan.world_size == 32 and [n.train_procs for n in plan.nodes] == [8, 8, 8, 8, 0]
    assert plan.vllm == {
        "mode": "server",
        "server_node": 4,
        "nodes": 1,
        "gpus": 8,
        "tensor_parallel_size": tp,
        "weight_sync": "nccl",
    }
    serving = plan.nodes[4]
    assert serving.vllm_gpus == list(range(8)) and "train" not in serving.commands
    assert f"--tensor-parallel-size {tp}" in " ".join(
        serving.commands["vllm"]
    ) and f"--data-parallel-size {engines}" in " ".join(serving.commands["vllm"])
    for node in plan.nodes[:4]:  # training nodes: every GPU, a 4-node training world
        assert (
            node.train_gpus == list(range(8)) and "--nnodes=4" in node.commands["train"] and "vllm" not in node.commands
        )


@pytest.mark.parametrize(
    "overrides,key,why",
    [
        (("vllm.nodes=2", "topology.nnodes=6"), "vllm.nodes", "talks to one server"),
        (("topology.nnodes=1",), "vllm.nodes", "leaves no node to train"),
        (
            ("topology.gpus_per_node=6", "vllm.tensor_parallel_size=4"),  # 4 divides the model's 64 heads, not 6 GPUs
            "vllm.tensor_parallel_size",
            "does not divide the serving node's 6 GPUs",
        ),
        (("vllm.gpus=2",), "vllm.gpus", "serves on all its 8 GPUs"),
        (("vllm=colocate",), "vllm.nodes", "dedicated serving nodes run the vLLM server"),
    ],
)
def test_invalid_serving_layouts_are_named(overrides, key, why):
    _, problems = plan_for(*LAYOUT, *overrides)
    assert any(p.key == key and why in p.why for p in problems), problems


def test_launcher_local_needs_the_serving_nodes_address():
    _, problems = check(compose_cfg(*LAYOUT[:-1], "action=run"), Path("/x"), gpus=8)
    assert any(p.key == "vllm.server_host" for p in problems)
