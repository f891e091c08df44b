"""Before launch, a node of a multi-node run reaches what the plan says it connects to (launching/reachability.py),
tried on this machine's own loopback, with names that do not resolve and addresses that are not its own. An address
nothing answers at needs a network where one exists (this machine's sandbox accepts every outbound connect): the
two-node cluster's, in tests/launching/test_two_nodes.py, with a node's own address too."""

import socket

import pytest

from grpo_exp.launching import reachability
from grpo_exp.launching.ports import free_port
from tests.helpers import compose_cfg, problems

TEST_NET = "192.0.2.1"  # RFC 5737: documentation only, never a host of this machine, nothing answers there


def _check(node_rank: int, *overrides: str):
    cfg = compose_cfg("topology=cpu2x1", f"topology.node_rank={node_rank}", *overrides)
    return reachability.check(cfg, node_rank, serving_node=None)


def test_a_single_node_needs_nothing_of_the_network():
    assert reachability.check(compose_cfg(), 0, None) == []


def test_node_0_owns_its_loopback_and_node_1_reaches_it_before_anything_listens():
    port = free_port()  # nothing listens: node 0 may start after node 1, and a refused connection is a host there
    assert _check(0, "topology.master_addr=127.0.0.1", f"topology.master_port={port}") == []
    assert _check(1, "topology.master_addr=127.0.0.1", f"topology.master_port={port}") == []


def test_a_listening_rendezvous_is_reached():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert _check(1, "topology.master_addr=localhost", f"topology.master_port={server.getsockname()[1]}") == []


def test_a_name_that_does_not_resolve_is_named_with_the_node():
    [found] = _check(1, "topology.master_addr=no-such-node.invalid")
    assert found.key == "topology.master_addr"
    assert f"'no-such-node.invalid' does not resolve on node 1 ({socket.gethostname()})" in found.why
    assert "/etc/hosts" in found.fix


def test_node_0_given_another_machines_address_is_refused():
    [found] = _check(0, f"topology.master_addr={TEST_NET}")
    assert f"{TEST_NET} ({TEST_NET}) is not an address of node 0" in found.why and "hosts the rendezvous" in found.why


def test_the_driver_of_a_slurm_job_leaves_the_check_to_the_jobs_nodes():
    """launcher=slurm: node 0's address is only known inside the job (launchers/slurm/task.py checks there); the
    driver's preflight does not try the placeholder."""
    found = problems("launcher=slurm", "topology=cpu2x1", "launcher.slurm.cpus_per_task=1")
    assert not [p for p in found if p.key == "topology.master_addr"], found


@pytest.mark.parametrize("node_rank", [0, 1])
def test_the_driver_refuses_an_unreachable_rendezvous_with_exit_2(node_rank):
    found = problems("topology=cpu2x1", f"topology.node_rank={node_rank}", "topology.master_addr=no-such-node.invalid")
    assert [p.key for p in found if "does not resolve" in p.why] == ["topology.master_addr"], found
