"""Dedicated vLLM nodes: the plan of TRL's 4+1 layout, its validation, and a CPU rehearsal of the
launch with two drivers on loopback. vLLM cannot run without a GPU, so in the rehearsal a stand-in
process (tests/standin_vllm.py) plays `vllm serve` on the serving node and the trainers
generate with transformers; what is rehearsed is the launch: the serving node starts its server
and agent, the training node waits for its health, checks its config, trains, and stops it."""

import sys
from pathlib import Path

import pytest

from grpo_exp.core import outcome, rundir
from grpo_exp.launching.ports import free_port
from tests.helpers import REPO, check, compose_cfg

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
    assert plan.vllm == {"mode": "server", "server_node": 4, "nodes": 1, "gpus": 8, "tensor_parallel_size": tp}
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
        (("vllm.tensor_parallel_size=3",), "vllm.tensor_parallel_size", "does not divide the serving node's 8 GPUs"),
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


@pytest.fixture
def nodes(background_driver, tmp_path):
    """Start a node's driver: nodes(rank, *overrides) -> Popen. Node 1 serves, node 0 trains."""
    ports = [
        f"topology.master_port={free_port()}",
        f"vllm.server_port={free_port()}",
        f"vllm.group_port={free_port()}",
        f"vllm.agent_port={free_port()}",
    ]
    standin = f"vllm.standin='{sys.executable} {REPO / 'tests' / 'standin_vllm.py'}'"

    def start(rank, *overrides):
        return background_driver(
            "logger=none",
            "topology=cpu2x1",
            f"topology.node_rank={rank}",
            "vllm=server",
            "vllm.nodes=1",
            "vllm.server_host=127.0.0.1",
            "vllm.server_timeout=60",
            "trainer.max_steps=2",
            *ports,
            f"hydra.run.dir={tmp_path / 'run'}",
            standin,
            *overrides,
        )

    return start


@pytest.mark.e2e
def test_rehearsal_serving_node_and_training_node(nodes, tmp_path):
    serving = nodes(1)
    trainer = nodes(0)
    assert trainer.wait(timeout=300) == 0, trainer.stdout.read()[-3000:]
    assert serving.wait(timeout=60) == 0, serving.stdout.read()[-3000:]  # stopped by node 0 at the end
    run_dir = tmp_path / "run"
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2 and summary["runtime"]["world_size"] == 1
    served = rundir.read_summary(run_dir / "nodes" / "1")
    assert served["status"] == "completed" and "serving node" in served["note"]
    assert "stand-in vLLM server on 127.0.0.1" in (run_dir / "nodes" / "1" / rundir.LOG).read_text()


@pytest.mark.e2e
def test_a_serving_node_with_another_config_stops_both(nodes, tmp_path):
    serving = nodes(1, "trainer.learning_rate=3e-05")
    trainer = nodes(0)
    assert trainer.wait(timeout=120) == outcome.EXIT_HANG_PREVENTED == 5
    assert serving.wait(timeout=60) == 5
    for summary in (rundir.read_summary(tmp_path / "run"), rundir.read_summary(tmp_path / "run" / "nodes" / "1")):
        assert summary["status"] == "mismatch"
        assert "trainer.learning_rate differs between nodes: node(s) [0]: 1e-05; node(s) [1]: 3e-05" in summary["error"]
