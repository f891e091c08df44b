"""A dedicated serving node (vllm.nodes=1), rehearsed on CPU with two drivers on loopback and real vLLM: the serving
node starts `vllm serve` and its agent, the training node waits for its health, checks its config, trains with the
server's completions (weights synced through files), and stops it at the end. Real vLLM (make test-vllm)."""

import pytest

from grpo_exp.core import outcome, rundir
from grpo_exp.launching.ports import free_port

pytestmark = pytest.mark.vllm


@pytest.fixture
def nodes(background_driver, tmp_path):
    """Start a node's driver: nodes(rank, *overrides) -> Popen. Node 1 serves, node 0 trains."""
    ports = [
        f"topology.master_port={free_port()}",
        f"vllm.server_port={free_port()}",
        f"vllm.group_port={free_port()}",
        f"vllm.agent_port={free_port()}",
    ]

    def start(rank, *overrides):
        return background_driver(
            "logger=none",
            "topology=cpu2x1",
            f"topology.node_rank={rank}",
            "vllm=server",
            "vllm.nodes=1",
            "vllm.enforce_eager=true",
            "vllm.server_host=127.0.0.1",
            "vllm.server_timeout=300",
            "trainer.max_steps=2",
            *ports,
            f"hydra.run.dir={tmp_path / 'run'}",
            *overrides,
        )

    return start


def test_a_serving_node_serves_the_training_node_with_real_vllm(nodes, tmp_path):
    serving = nodes(1)
    trainer = nodes(0)
    assert trainer.wait(timeout=600) == 0, trainer.stdout.read()[-3000:]
    assert serving.wait(timeout=60) == 0, serving.stdout.read()[-3000:]  # stopped by node 0 at the end
    run_dir = tmp_path / "run"
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2 and summary["runtime"]["world_size"] == 1
    served = rundir.read_summary(run_dir / "nodes" / "1")
    assert served["status"] == "completed" and "serving node" in served["note"]
    serving_log = (run_dir / "nodes" / "1" / rundir.LOG).read_text()
    assert '"POST /v1/completions HTTP/1.1" 200' in serving_log  # the trainers' generations
    assert '"POST /collective_rpc HTTP/1.1" 200' in serving_log  # and their weight syncs
    assert served["memory/vllm/startup/kv_cache_gib"] == 1.0  # vLLM's own figures, on the node that ran it


def test_a_serving_node_with_another_config_stops_both(nodes, tmp_path):
    serving = nodes(1, "trainer.learning_rate=3e-05")
    trainer = nodes(0)
    assert trainer.wait(timeout=400) == outcome.EXIT_HANG_PREVENTED == 5
    assert serving.wait(timeout=60) == 5
    for summary in (rundir.read_summary(tmp_path / "run"), rundir.read_summary(tmp_path / "run" / "nodes" / "1")):
        assert summary["status"] == "mismatch"
        assert "trainer.learning_rate differs between nodes: node(s) [0]: 1e-05; node(s) [1]: 3e-05" in summary["error"]
