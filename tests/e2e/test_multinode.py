"""Multi-node behaviour rehearsed on loopback: two drivers, one per "node" (topology=cpu2x1),
each started the way a user starts one per machine. Real rendezvous, real gloo groups."""

import time

import pytest

from grpo_exp.core import outcome, rundir
from grpo_exp.launching.ports import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def node(background_driver, tmp_path):
    """Start one node's driver in the background: node(rank, *overrides) -> (Popen, run_dir)."""
    port = free_port()

    def start(rank: int, *overrides: str):
        shared = tmp_path / "run"  # one run dir on a "shared filesystem": node N > 0 writes under nodes/<N>/
        proc = background_driver(
            "logger=none",
            "topology=cpu2x1",
            f"topology.node_rank={rank}",
            f"topology.master_port={port}",
            f"hydra.run.dir={shared}",
            *overrides,
        )
        return proc, shared / rundir.node_subdir(rank)

    return start


def test_two_nodes_on_loopback_train_for_real(node):
    p0, dir0 = node(0, "trainer.max_steps=2")
    p1, dir1 = node(1, "trainer.max_steps=2")
    assert p0.wait(timeout=300) == 0, p0.stdout.read()[-3000:]
    assert p1.wait(timeout=60) == 0, p1.stdout.read()[-3000:]
    summary = rundir.read_summary(dir0)
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert summary["runtime"]["world_size"] == 2 and summary["runtime"]["backend"] == "gloo"
    assert [m["step"] for m in rundir.read_metrics(dir0)] == [1, 2]
    assert rundir.read_summary(dir1)["status"] == "completed"
    assert "[rank1]" in (dir1 / rundir.LOG).read_text()  # node 1 ran global rank 1
    # nothing shared, nothing overwritten
    assert dir1 == dir0 / "nodes" / "1" and (dir0 / ".hydra").is_dir() and (dir1 / ".hydra").is_dir()
    assert "[rank1]" not in (dir0 / rundir.LOG).read_text()


def test_differing_override_on_node_1_stops_both_nodes_naming_the_key(node):
    started = time.time()
    p0, dir0 = node(0)
    p1, dir1 = node(1, "trainer.learning_rate=3e-05")
    assert p0.wait(timeout=120) == outcome.EXIT_HANG_PREVENTED == 5
    assert p1.wait(timeout=60) == 5
    assert time.time() - started < 60
    for run_dir in (dir0, dir1):
        summary = rundir.read_summary(run_dir)
        assert summary["status"] == "mismatch"
        assert "trainer.learning_rate differs between nodes: node(s) [0]: 1e-05; node(s) [1]: 3e-05" in summary["error"]


def test_a_node_that_never_arrives_is_named_after_the_timeout(node):
    p0, dir0 = node(0, "topology.rendezvous_timeout_s=5")
    assert p0.wait(timeout=120) == 5
    summary = rundir.read_summary(dir0)
    assert summary["status"] == "rendezvous_timeout"
    assert "1/2 clients joined" in summary["error"] and "topology.node_rank" in summary["error"]
