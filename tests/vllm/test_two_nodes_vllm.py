"""Real vLLM across the two-node cluster (scripts/slurm_local.sh: two network namespaces, a slurmd each): a dedicated
serving node under one SLURM job, serving and syncing across the link until the serving node's faults during a weight
sync (its vLLM killed, its link cut), and the seeds' differing use_vllm. Real vLLM (make test-vllm); skipped, with the
reason, without the cluster."""

import contextlib
import os
import signal
import subprocess
import time

import psutil
import pytest

from grpo_exp.core import outcome, rundir
from tests.launching.test_two_nodes import (  # noqa: F401  (needs_two_nodes: the fixture, used by name)
    SLURM,
    _ended,
    in_node,
    link_down,
    needs_two_nodes,
    node_back,
    nodes,
    phase_of,
    until,
)

pytestmark = [pytest.mark.vllm, pytest.mark.two_node, pytest.mark.xdist_group("slurm")]

# Node 0 trains, node 1 (the job's last host) serves; weights go through files in the run dir, which both mount.
SERVED = [
    *SLURM,
    "topology=cpu2x1",
    "vllm=server",
    "vllm.nodes=1",
    "vllm.enforce_eager=true",
    "vllm.server_timeout=300",
]


@pytest.fixture
def served(background_driver, tmp_path):
    """served(*overrides) -> (driver, run_dir): a job with a dedicated serving node, in the background; cancelled at
    the end, whatever happened."""
    run_dir = tmp_path / "run"

    def start(*overrides: str):
        return background_driver(*SERVED, *overrides, f"hydra.run.dir={run_dir}"), run_dir

    yield start
    job = rundir.read_summary(run_dir).get("slurm_job_id") if run_dir.exists() else None
    if job:
        subprocess.run(["scancel", str(job)], capture_output=True)
    (_, _), (second, _) = nodes()
    for server in _servers(second):  # a server whose task a test killed would hold the next one's port
        os.killpg(server.pid, signal.SIGKILL)
    node_back(second)


def _servers(name: str) -> list[psutil.Process]:
    """The vLLM servers on node `name`: `vllm serve` in its network namespace (each the leader of its own process
    group: the engine core and workers are in it)."""
    netns = os.stat(f"/var/run/netns/{name}").st_ino
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "vllm.entrypoints.cli.main" in " ".join(proc.info["cmdline"] or []):
                if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == netns:
                    found.append(proc)
        except (OSError, psutil.Error):
            pass
    return found


def test_two_node_use_vllm_differs_stops_both_nodes(background_driver, tmp_path):
    """The seeds' hang: node 0 started with vLLM (colocated), node 1 without. Both stop within 60 s naming it."""
    (first, address), (second, _) = nodes()
    common = ["topology=cpu2x1", f"topology.master_addr={address}", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    drivers = [
        background_driver(*common, f"topology.node_rank={rank}", mode, wrap=in_node(name))
        for rank, name, mode in ((0, first, "vllm=colocate"), (1, second, "vllm=off"))
    ]
    started = time.time()
    ended = [_ended(driver, 120) for driver in drivers]
    assert [code for code, _ in ended] == [outcome.EXIT_HANG_PREVENTED] * 2, ended[0][1][-2000:] + ended[1][1][-2000:]
    assert time.time() - started < 60
    for run_dir in (tmp_path / "run", tmp_path / "run" / rundir.node_subdir(1)):
        summary = rundir.read_summary(run_dir)
        assert summary["status"] == "mismatch" and "vllm.mode differs between nodes" in summary["error"], summary


def _served_across_the_link(run_dir):
    """Up to the fault, the job ran as a dedicated serving node should: vLLM on node 1 at its own address, node 0
    generating with it and syncing its weights through the shared run dir, nobody told a loopback address. (A job that
    completes and stops its server at the end: tests/vllm/test_slurm_server.py, on one node.)"""
    (first, _), (second, _) = nodes()
    serving = (run_dir / "train.node1.log").read_text()
    assert '"POST /v1/completions HTTP/1.1" 200' in serving and '"POST /collective_rpc HTTP/1.1" 200' in serving
    assert (run_dir / rundir.LOG).read_text().count("weight sync: ") >= 2
    said = "".join(p.read_text() for p in (run_dir / rundir.SLURM).glob("*_log.out"))
    assert f"node 0: host {first}" in said and f"node 1: host {second}" in said
    assert "127.0.0.1" not in (run_dir / rundir.CONFIG).read_text()


def _in_weight_sync(driver, run_dir):
    until(lambda: len(rundir.read_metrics(run_dir)) >= 2 or driver.poll() is not None, 600, "2 steps")
    until(lambda: phase_of(run_dir, 0) == "weight_sync", 120, "node 0 in a weight sync", step=0.005)


@pytest.mark.parametrize("fault", ["vllm_killed", "link_cut"])
def test_two_node_serving_node_lost_during_a_weight_sync(served, fault):
    """The serving node's vLLM SIGKILLed (server, engine core, workers), or its link cut, while node 0 syncs weights
    to it: node 0's driver, which watches the server's /health while training runs (vllm_server.RemoteWatch), ends
    the run within its 3 missed checks (15 s) and the ranks' grace, failed, naming the server; the steps before it
    are kept. (Before the watch, the killed server's run waited out watchdog.stall_s.) A cut link also has SLURM mark
    the serving node down after SlurmdTimeout (30 s), which may kill the job before node 0 concludes it: the cause
    node 0 said first (outcome.ending) still leads the run's error."""
    (_, _), (second, _) = nodes()
    # no requeue: a link down past SlurmdTimeout (30 s) has SLURM requeue the job for a node it lost
    driver, run_dir = served("trainer.max_steps=200", "watchdog.stall_s=120", "preemption.grace_s=10",
                             "launcher.slurm.max_requeues=0")  # fmt: skip
    _in_weight_sync(driver, run_dir)
    steps = len(rundir.read_metrics(run_dir))
    _served_across_the_link(run_dir)
    with contextlib.ExitStack() as faults:
        if fault == "vllm_killed":
            [server] = _servers(second)
            os.killpg(server.pid, signal.SIGKILL)  # vllm serve, its engine core and workers
            hit = time.time()
        else:
            hit = faults.enter_context(link_down(second))
        code, out = _ended(driver, 240)
    summary = rundir.read_summary(run_dir)
    assert code == outcome.EXIT_FAILED and summary["status"] == "failed", out[-3000:]
    assert "the vLLM server on the serving node stopped answering http://node2:" in summary["error"], summary["error"]
    took = summary["ended_at"] - hit
    assert took < 15 + 10 + 30 and len(rundir.read_metrics(run_dir)) >= steps >= 2
    print(f"[figure] serving node {fault} in a weight sync: failed {took:.0f} s later, {steps} steps kept")
