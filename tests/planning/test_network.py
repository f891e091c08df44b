"""What a multi-node plan says it needs of the network (planning/network.py): plan.json's `network` and the lines
under the plan's nodes."""

from grpo_exp.launching import ports
from grpo_exp.planning import network, placement
from tests.helpers import compose_cfg


def _plan(*overrides: str, gpus: int = 0):
    cfg = compose_cfg(*overrides)
    ports.resolve_auto(cfg)  # as the driver's finalize does before it plans: several nodes get TRL's ports
    return placement.make_plan(cfg, "/run/config.yaml", detected_gpus=gpus)


def test_one_node_needs_nothing():
    assert _plan().network == [] and "network" not in placement.describe(_plan())


def test_two_training_nodes_need_the_rendezvous_and_each_other():
    plan = _plan("topology=cpu2x1", "topology.master_addr=10.0.0.1", "topology.master_port=29400")
    rendezvous, group = plan.network
    assert rendezvous == {
        "from": "node 1",
        "to": "node 0",
        "address": "10.0.0.1",
        "port": 29400,
        "for": "torchrun's rendezvous and store (heartbeats)",
    }
    assert (group["from"], group["to"], group["address"], group["port"]) == (
        "every training node", "every other one", None, None)  # fmt: skip
    shown = placement.describe(plan).splitlines()
    assert shown[-3:] == [
        "  network (open these between nodes):",
        "    node 1 -> node 0: torchrun's rendezvous and store (heartbeats) (10.0.0.1:29400)",
        "    every training node -> every other one: the process group's connections (gloo, NCCL) (ports the OS picks)",
    ]


def test_a_dedicated_serving_node_is_reached_by_node_0_for_its_api_agent_and_sync():
    gpu = _plan("model=qwen7b", "topology=2x8", "vllm=server", "vllm.nodes=1", "vllm.server_host=10.0.0.2", gpus=8)
    assert [(n["to"], n["address"], n["port"], n["for"]) for n in gpu.network] == [
        ("node 1", "10.0.0.2", 8000, "the vLLM server's HTTP API"),
        ("node 1", "10.0.0.2", 51217, "the serving node's agent (config check, stop)"),
        ("node 1", "10.0.0.2", 51216, "weight sync (NCCL)"),
    ]  # one training node: no rendezvous across the network
    cpu = _plan("topology=cpu2x1", "topology.nnodes=3", "vllm=server", "vllm.nodes=1", "vllm.server_host=h")
    assert cpu.network[0]["from"] == "node 1" and cpu.network[-1] == {
        "from": "node 0",
        "to": "node 2",
        "address": "<run dir>/weight_sync",
        "port": None,
        "for": "weight sync: a directory both nodes mount",
    }


def test_plan_json_holds_the_network():
    plan = _plan("topology=cpu2x1")
    assert plan.to_dict()["network"] == plan.network and network.describe([]) == []
