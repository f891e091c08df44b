"""Launch plans, asserted exactly, for cluster topologies this machine does not have; plus the
pieces of the hang-prevention machinery that need no second node."""

import json

import pytest

from grpo_exp.planning import placement
from tests.helpers import compose_cfg, run_job

CFG_PATH = "/runs/x/config.yaml"


def plan_for(*overrides, gpus=0):
    return placement.make_plan(compose_cfg("model=qwen7b", *overrides), CFG_PATH, detected_gpus=gpus)


def shape(plan):
    return [(n.node_rank, n.train_procs, n.train_gpus, n.vllm_gpus) for n in plan.nodes]


ALL8 = list(range(8))


@pytest.mark.parametrize("vllm", ["off", "colocate"])
def test_every_gpu_trains_without_a_server(vllm):
    assert shape(plan_for("topology=1x8", f"vllm={vllm}")) == [(0, 8, ALL8, [])]
    assert shape(plan_for("topology=2x8", f"vllm={vllm}")) == [(0, 8, ALL8, []), (1, 8, ALL8, [])]
    plan = plan_for("topology=4x8", f"vllm={vllm}")
    assert shape(plan) == [(r, 8, ALL8, []) for r in range(4)] and plan.world_size == 32
    assert plan.vllm == {
        "mode": vllm,
        "server_node": None,
        "nodes": 0,
        "gpus": 0,
        "tensor_parallel_size": 1,
        "weight_sync": None,
    }


def test_server_on_node_0_gives_7_plus_8():
    plan = plan_for("topology=2x8", "vllm=server")
    assert shape(plan) == [(0, 7, list(range(1, 8)), [0]), (1, 8, ALL8, [])]
    assert plan.world_size == 15
    assert plan.vllm == {
        "mode": "server",
        "server_node": 0,
        "nodes": 0,
        "gpus": 1,
        "tensor_parallel_size": 1,
        "weight_sync": "nccl",
    }


def test_symmetric_gives_7_plus_7():
    plan = plan_for("topology=2x8", "vllm=server", "topology.symmetric=true")
    assert shape(plan) == [(0, 7, list(range(1, 8)), [0]), (1, 7, list(range(1, 8)), [])]
    assert plan.world_size == 14


def test_server_with_tensor_parallel_2():
    plan = plan_for("topology=4x8", "vllm=server", "vllm.gpus=2", "vllm.tensor_parallel_size=2")
    assert shape(plan) == [(0, 6, list(range(2, 8)), [0, 1])] + [(r, 8, ALL8, []) for r in (1, 2, 3)]
    assert plan.world_size == 30
    assert plan.vllm == {
        "mode": "server",
        "server_node": 0,
        "nodes": 0,
        "gpus": 2,
        "tensor_parallel_size": 2,
        "weight_sync": "nccl",
    }
    argv = " ".join(plan.nodes[0].commands["vllm"])
    assert "--tensor-parallel-size 2" in argv and "--data-parallel-size 1" in argv


def test_single_node_server_1x8():
    plan = plan_for("topology=1x8", "vllm=server")
    assert shape(plan) == [(0, 7, list(range(1, 8)), [0])] and plan.world_size == 7


def test_env_and_commands_of_a_server_node():
    node0, node1 = plan_for(
        "topology=2x8", "vllm=server", "topology.master_addr=10.0.0.1", "topology.master_port=29400"
    ).nodes
    assert node0.env["train"] == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29400",
        "NODE_RANK": "0",
        "NNODES": "2",
        "CUDA_VISIBLE_DEVICES": "1,2,3,4,5,6,7",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "GRPO_EXP_VLLM_GPUS": "0",
    }
    assert node0.env["vllm"] == {"CUDA_VISIBLE_DEVICES": "0", **placement.SERVER_ENV}  # as trl vllm-serve sets it
    assert placement.SERVER_ENV["VLLM_SERVER_DEV_MODE"] == "1"
    assert node0.commands["train"][1:] == [
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=7",
        "--nnodes=2",
        "--node-rank=0",
        "--master-addr=10.0.0.1",
        "--master-port=29400",
        "--rdzv-conf=timeout=300",
        "-m",
        "grpo_exp.training.worker",
        CFG_PATH,
    ]
    assert "--nproc-per-node=8" in node1.commands["train"] and "vllm" not in node1.commands
    assert node1.env["train"]["NODE_RANK"] == "1" and "vllm" not in node1.env


def test_cpu_topologies():
    assert shape(placement.make_plan(compose_cfg(), CFG_PATH, detected_gpus=0)) == [(0, 2, [], [])]
    plan = placement.make_plan(compose_cfg("topology=cpu2x1"), CFG_PATH, detected_gpus=0)
    assert shape(plan) == [(0, 1, [], []), (1, 1, [], [])] and plan.device == "cpu"
    single = placement.make_plan(compose_cfg("topology.cpu_procs=1"), CFG_PATH, detected_gpus=0)
    assert single.nodes[0].commands["train"][1:] == ["-m", "grpo_exp.training.worker", CFG_PATH]


def test_local_topology_uses_detected_gpus():
    assert shape(placement.make_plan(compose_cfg(), CFG_PATH, detected_gpus=4)) == [(0, 4, [0, 1, 2, 3], [])]


def test_action_plan_writes_plan_json_for_a_cluster_on_this_machine(tmp_path, capsys):
    run_dir = tmp_path / "run"
    ended = run_job("model=qwen7b", "topology=2x8", "vllm=server", "action=plan", run_dir=run_dir)
    out, err = capsys.readouterr()
    assert ended.code == 0, err
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["world_size"] == 15
    assert [n["train_procs"] for n in plan["nodes"]] == [7, 8]
    assert set(plan["nodes"][0]) >= {"node_rank", "train_procs", "train_gpus", "vllm_gpus", "env", "commands"}
    assert {k: plan["vllm"][k] for k in ("mode", "server_node", "gpus", "tensor_parallel_size")} == {
        "mode": "server",
        "server_node": 0,
        "gpus": 1,
        "tensor_parallel_size": 1,
    }
    assert plan["vllm"]["peak_gib"] > 0 and "kv_cache" in plan["vllm"]["components_gib"]  # the engine's memory plan
    assert "node 0: 7 training process(es) on GPUs 1,2,3,4,5,6,7, vLLM server on GPUs 0" in out
    assert not (run_dir / "train.log").exists() and not (run_dir / "summary.json").exists()  # nothing launched


def test_a_large_cluster_is_summarised_on_the_console_and_listed_in_full_in_the_plan():
    cfg = compose_cfg("model=qwen72b", "topology=4x8", "topology.nnodes=512", "vllm=server", "action=plan")
    plan = placement.make_plan(cfg, "/run/config.yaml", detected_gpus=0)
    assert len(plan.nodes) == 512 and plan.nodes[511].commands["train"] != plan.nodes[510].commands["train"]
    shown = placement.describe(plan).splitlines()
    nodes, network = shown[:7], shown[7:]  # the connections between nodes follow the nodes (planning/network.py)
    assert nodes[-1] == "  nodes 2..511: the same as node 1, each with its own --node-rank"
    assert network[0] == "  network (open these between nodes):" and len(network) == 3
    assert "nodes 1..511 -> node 0: torchrun's rendezvous and store (heartbeats) (127.0.0.1:29500)" in network[1]
    assert "node 0: 7 training process(es) on GPUs 1,2,3,4,5,6,7, vLLM server on GPUs 0" in shown[1]
    small = placement.describe(placement.make_plan(compose_cfg("model=qwen7b", "topology=2x8"), "/c", detected_gpus=0))
    assert "node 1: 8 training process(es)" in small and "the same as" not in small  # two nodes: both in full


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["vllm.gpus=8"], "vllm.gpus: reserves 8 of node 0's 8 GPUs"),
        (["vllm.gpus=3", "vllm.tensor_parallel_size=2"], "vllm.gpus: is 3; the server needs a positive multiple"),
        (["topology.node_rank=2"], "topology.node_rank: is 2, outside 0..1"),
        (
            ["trainer.per_device_train_batch_size=1", "trainer.num_generations=8"],
            "8 does not divide the generation batch 15",
        ),
    ],
)
def test_plan_level_problems(tmp_path, capsys, overrides, message):
    run_dir = tmp_path / "run"
    ended = run_job("model=qwen7b", "topology=2x8", "vllm=server", "action=plan", *overrides, run_dir=run_dir)
    err = capsys.readouterr().err
    assert ended.code == 2 and message in err, err
    assert not run_dir.exists()
