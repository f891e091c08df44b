"""Two nodes for real: the two-node SLURM cluster scripts/slurm_local.sh starts on this machine (each node a network
namespace with its own address and host name, one slurmd in each; .ci/run starts it as root), and runs that cross its
link: SLURM jobs over both nodes, one driver per node, the seeds' hangs, and the faults multi-node GRPO dies of (a node
killed, its link cut or slowed, a rank failing, SLURM taking a node down mid-job). Skipped, with the reason, where no
such cluster answers. `make test-two-nodes` runs them (marker two_node); make test and make test-fast leave them out.

Every figure docs/multi-node.md states of a fault (seconds to detect it, steps kept) is asserted here."""

import contextlib
import functools
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from grpo_exp.core import outcome, rundir
from tests.helpers import REPO, kill_all, slurm_problem

HEARTBEAT_S = 10  # watchdog.heartbeat_s in the fault tests: a lost node is named within it (plus a beat)
PACED = "+data.rewards.paced._target_=tests.memory_hog.paced"  # 0.4 s a step: a run that lasts until stopped
SLURM = ["launcher=slurm", "launcher.slurm.cpus_per_task=1", "launcher.slurm.time_min=10", "logger=none"]


@functools.cache
def nodes() -> list[tuple[str, str]]:
    """The cluster's nodes, (name, address), as SLURM knows them (sinfo's NodeAddr)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %o"], capture_output=True, text=True, timeout=20).stdout
    return sorted({tuple(line.split()) for line in out.splitlines() if line.strip()})


@functools.cache
def _cluster_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, links cut and slowed)"
    if (problem := slurm_problem()) is not None:
        return problem
    found = nodes()
    missing = [name for name, _ in found if not Path(f"/var/run/netns/{name}").exists()]
    if len(found) < 2 or missing:
        return f"no two-node cluster in network namespaces (nodes {found}); sudo bash scripts/slurm_local.sh starts one"
    return None


@pytest.fixture(autouse=True)
def needs_two_nodes():
    if (problem := _cluster_problem()) is not None:
        pytest.skip(f"two nodes: {problem}")


# The cluster's 2 nodes share 2 CPUs: its tests run one after another, on the worker that runs the SLURM ones.
pytestmark = [pytest.mark.two_node, pytest.mark.e2e, pytest.mark.xdist_group("slurm")]


def in_node(name: str, *argv: str) -> list[str]:
    """argv run on node `name`, as its slurmd runs a job: its network namespace (nsenter: `ip netns exec` remounts
    /sys) and its own host name (a UTS namespace)."""
    return ["nsenter", f"--net=/var/run/netns/{name}", "unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"',
            "sh", *argv]  # fmt: skip


@contextlib.contextmanager
def link_down(name: str):
    """Node `name`'s link to the others cut (its interface down), and restored after."""
    subprocess.run(["ip", "-n", name, "link", "set", "eth0", "down"], check=True)
    try:
        yield time.time()
    finally:
        subprocess.run(["ip", "-n", name, "link", "set", "eth0", "up"], check=True)
        node_back(name)


def node_back(name: str) -> None:
    """Node `name` taking jobs again: a link down for longer than SlurmdTimeout (30 s) leaves it DOWN (not
    responding) until slurmctld next hears from it; an admin's `state=resume` is what brings it back at once."""
    deadline = time.time() + 60
    while time.time() < deadline:
        state = subprocess.run(["sinfo", "-h", "-n", name, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if state in ("idle", "mixed", "allocated", "completing"):
            return
        subprocess.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], capture_output=True)
        time.sleep(1)
    raise AssertionError(f"node {name} did not come back: {state}")


@contextlib.contextmanager
def link_slowed(name: str, rate: str):
    """Node `name`'s outgoing traffic limited to `rate` (tc's token bucket: these kernels have tbf, not netem)."""
    subprocess.run(
        ["tc", "-n", name, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kbit", "latency",
         "2s"], check=True)  # fmt: skip
    try:
        yield
    finally:
        subprocess.run(["tc", "-n", name, "qdisc", "del", "dev", "eth0", "root"], capture_output=True)


def processes_on(name: str, run_dir: Path) -> list[psutil.Process]:
    """The run's processes on node `name`: those in its network namespace whose command line names the run dir
    (the job's task, torchrun, the workers)."""
    netns = os.stat(f"/var/run/netns/{name}").st_ino
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == netns and str(run_dir) in " ".join(
                proc.info["cmdline"] or []
            ):
                found.append(proc)
        except (OSError, psutil.Error):
            pass
    return found


def until(condition, timeout: float, what: str, step: float = 0.2):
    deadline = time.time() + timeout
    while not (value := condition()):
        assert time.time() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(step)
    return value


def phase_of(run_dir: Path, rank: int) -> str:
    path = rundir.phase_path(run_dir, rank)
    return path.read_text().strip() if path.exists() else ""


@pytest.fixture
def node_driver(background_driver):
    """node_driver(name, node_rank, *overrides) -> Popen: `python -m grpo_exp` started on that node, as a user starts
    one per machine (the multi-node docs' command). Whatever is still running at the end is killed."""

    def start(name: str, node_rank: int, *overrides: str) -> subprocess.Popen:
        common = ["topology=cpu2x1", f"topology.node_rank={node_rank}", "logger=none"]
        return background_driver(*common, *overrides, wrap=in_node(name))

    return start


@pytest.fixture
def slurm_run(background_driver, tmp_path):
    """slurm_run(*overrides) -> (driver, run_dir): a `launcher=slurm topology=cpu2x1` run over both nodes in the
    background; its job is cancelled at the end, whatever happened."""
    run_dir = tmp_path / "run"

    def start(*overrides: str):
        return background_driver(*SLURM, "topology=cpu2x1", *overrides, f"hydra.run.dir={run_dir}"), run_dir

    yield start
    job = rundir.read_summary(run_dir).get("slurm_job_id") if run_dir.exists() else None
    if job:
        subprocess.run(["scancel", str(job)], capture_output=True)


def _ended(driver: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        out, _ = driver.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_all([driver, *psutil.Process(driver.pid).children(recursive=True)])
        left = driver.communicate()[0][-3000:]
        raise AssertionError(f"the driver did not end within {timeout:.0f} s: {left}") from None
    return driver.returncode, out


def _steps(run_dir: Path) -> int:
    return len(rundir.read_metrics(run_dir))


# Real two-node runs.


def test_two_node_slurm_job_trains_across_the_link(cli):
    """One SLURM job over both nodes: torchrun's rendezvous at node 0's address across the link, DDP over gloo, each
    rank on its own host; metrics, summaries and both nodes' logs gathered in the run dir. (ZeRO-2 over gloo across
    the link: the node-down test below, which also resumes its sharded optimizer on both nodes.)"""
    result, run_dir = cli(*SLURM, "topology=cpu2x1", "trainer.max_steps=2", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    runtime = summary["runtime"]
    (first, first_address), (second, _) = nodes()
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert runtime["world_size"] == 2 and runtime["backend"] == "gloo" and runtime["hosts"] == [first, second]
    assert runtime["zero_stage"] is None and runtime["wrapper"] == "DistributedDataParallel"
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == [1, 2]
    logs = (run_dir / rundir.SLURM).glob("*_log.out")
    said = "".join(p.read_text() for p in logs)
    assert f"node 0: host {first}, rendezvous at {first}:" in said and f"node 1: host {second}" in said
    assert "[rank1]" in (run_dir / "train.node1.log").read_text()  # node 1 ran global rank 1
    assert "127.0.0.1" not in (run_dir / rundir.CONFIG).read_text()  # nobody was told a loopback address
    assert f"rendezvous at {first}:" in said and first_address.startswith("10.")


def test_two_node_mismatch_stops_both_nodes_naming_it(node_driver, tmp_path):
    """The seeds' hang: nodes started with different process counts (NPROC_PER_NODE). Both stop within 60 s naming the
    difference, across the link as on loopback (where a differing override is tested: tests/e2e/test_multinode.py;
    a differing use_vllm: tests/vllm/test_two_nodes_vllm.py)."""
    node1, key = ["topology.cpu_procs=2"], "procs_per_node differs between nodes: node(s) [0]: 1; node(s) [1]: 2"
    (first, address), (second, _) = nodes()
    shared = tmp_path / "run"
    common = [f"topology.master_addr={address}", f"hydra.run.dir={shared}"]
    started = time.time()
    p0 = node_driver(first, 0, *common)
    p1 = node_driver(second, 1, *common, *node1)
    code0, out0 = _ended(p0, 120)
    code1, out1 = _ended(p1, 60)
    assert time.time() - started < 60, f"took {time.time() - started:.0f} s"
    assert code0 == code1 == outcome.EXIT_HANG_PREVENTED, out0[-2000:] + out1[-2000:]
    for run_dir in (shared, shared / rundir.node_subdir(1)):
        summary = rundir.read_summary(run_dir)
        assert summary["status"] == "mismatch" and key in summary["error"], summary.get("error")
    print(f"[figure] process counts differ: both nodes stopped {time.time() - started:.1f} s after they started")


@pytest.mark.parametrize("where", ["unroutable", "unresolved", "not_node_0s"])
def test_two_node_unreachable_rendezvous_is_named_before_launch(node_driver, where):
    """A node that cannot reach node 0's rendezvous (or node 0 given another machine's address) is exit 2 within
    seconds naming the node, the address and the port, nothing launched: not a rendezvous timeout's silence."""
    (first, first_address), (second, second_address) = nodes()
    name, rank, addr, said = {
        # no host answers: 3 s (the kernel's neighbour discovery gives up), CONNECT_TIMEOUT_S at most
        "unroutable": (second, 1, "10.77.0.99", f"node 1 ({second}) cannot reach node 0's rendezvous at 10.77.0.99:"),
        "unresolved": (second, 1, "no-such-node", f"'no-such-node' does not resolve on node 1 ({second})"),  # 0.5 s
        "not_node_0s": (first, 0, second_address, f"is not an address of node 0 ({first})"),
    }[where]
    started = time.time()
    code, out = _ended(node_driver(name, rank, f"topology.master_addr={addr}"), 60)
    assert code == outcome.EXIT_INVALID and "Traceback" not in out, out[-3000:]
    assert f"topology.master_addr: {said}" in out or f"topology.master_addr: {addr}" in out, out[-2000:]
    assert said in out and time.time() - started < 30


# Faults mid-step. Each keeps what finished: the metrics of finished steps, the last checkpoint (every 2 steps),
# summary.json with the node and phase that failed.

FAULT_RUN = [
    "trainer.max_steps=10000",
    PACED,
    f"watchdog.heartbeat_s={HEARTBEAT_S}",
    "trainer.save_strategy=steps",
    "trainer.save_steps=2",
    "launcher.slurm.max_requeues=0",
]


def _kept(run_dir: Path, summary: dict, steps_before: int) -> None:
    """Nothing lost: every finished step's metrics, a checkpoint, the run's step and its memory peaks."""
    assert _steps(run_dir) >= steps_before and summary["global_step"] >= steps_before, summary
    assert rundir.latest_checkpoint(run_dir) is not None
    assert any(k.startswith("memory/peak/") for k in summary), sorted(summary)


def test_two_node_link_cut_during_a_collective_is_named_within_the_heartbeat(slurm_run):
    """The hang of the report: node 1's link cut while rank 0 waits in a collective for it (rank 1's reward takes 2 s,
    rank 0's none: rank 0 waits in the gather that follows). gloo would wait out its 30-minute timeout; the heartbeat
    names it within watchdog.heartbeat_s on both sides, with every rank's Python stacks (rank 0's main thread in the
    collective) and the phase; the run's status says which node lost whom."""
    (first, _), (second, _) = nodes()
    driver, run_dir = slurm_run(*FAULT_RUN, "+data.rewards.paced.only_rank=1", "+data.rewards.paced.seconds=2")
    until(lambda: _steps(run_dir) >= 3 or driver.poll() is not None, 240, "3 steps")
    until(lambda: phase_of(run_dir, 1) == "reward", 60, "rank 1 in its reward", step=0.01)
    time.sleep(0.5)  # rank 0 is in the gather by now, rank 1 still in its reward
    steps = _steps(run_dir)
    with link_down(second) as cut:
        code, out = _ended(driver, HEARTBEAT_S + 120)
    summary = rundir.read_summary(run_dir)
    records = {r["rank"]: r for r in outcome.read_records(run_dir)}
    assert code == outcome.EXIT_HANG_PREVENTED and summary["status"] == "node_lost", out[-3000:]
    detected = min(r["time"] for r in records.values())
    assert detected - cut < HEARTBEAT_S + 5, f"detected {detected - cut:.1f} s after the cut"
    print(f"[figure] link cut: node_lost {detected - cut:.1f} s after the cut, {_steps(run_dir)} steps kept")
    assert {k: v for k, v in records[0]["lost"].items() if k != "phase"} == {
        "node": 0, "host": first, "rank": 0, "lost_node": 1}  # fmt: skip
    assert records[1]["lost"] == {"node": 1, "host": second, "rank": 1, "lost_node": 0, "phase": "reward"}
    assert f"node 0 ({first}, rank 0) lost node 1 ({second})" in records[0]["error"]
    assert f"node 1 ({second}, rank 1) lost node 0" in records[1]["error"]
    assert "lost node" in summary["error"] and summary["lost"]["phase"] in ("generate", "reward")
    main_thread = (run_dir / rundir.STACKS / "rank0.txt").read_text().split("\n\n")[-1]
    assert "torch/distributed" in main_thread and "grpo_trainer.py" in main_thread, main_thread  # in the collective
    assert "most recent call first" in (run_dir / rundir.STACKS / "rank1.txt").read_text()
    _kept(run_dir, summary, steps)


def test_two_node_sigkill_of_a_node_ends_the_run_with_the_node_and_phase(slurm_run):
    """Node 1's processes SIGKILLed in the train phase (its machine gone): node 0 ends within seconds, failed or
    node_lost, naming node 1 and the phase it was in; the metrics and checkpoint stay, and the driver does not wait
    for the result node 1's task will never write."""
    (_, _), (second, second_address) = nodes()
    # 4 micro-batches a step: the train phase is ~0.7 s of each step's 4 s, long enough to be caught in
    driver, run_dir = slurm_run(*FAULT_RUN, "trainer.gradient_accumulation_steps=4")
    until(lambda: _steps(run_dir) >= 3 or driver.poll() is not None, 240, "3 steps")
    victims = until(lambda: processes_on(second, run_dir), 10, "node 1's processes")
    until(lambda: phase_of(run_dir, 1) == "train", 60, "rank 1 in the train phase", step=0.005)
    time.sleep(0.1)  # inside its 4 micro-batches' backward passes, not at their edge
    kill_all(victims)
    killed = time.time()
    steps = _steps(run_dir)
    code, out = _ended(driver, HEARTBEAT_S + 120)
    summary = rundir.read_summary(run_dir)
    assert code in (outcome.EXIT_FAILED, outcome.EXIT_HANG_PREVENTED), out[-3000:]
    assert summary["status"] in ("failed", "node_lost"), summary
    noticed = rundir.read_json(run_dir / rundir.RANKS / "rank0.json")["time"] - killed
    assert noticed < HEARTBEAT_S + 5
    print(f"[figure] node 1 killed: node 0 ended {noticed:.1f} s later ({summary['status']}), {steps} steps kept")
    # node 0 saw the connection close (gloo names the peer's address) in whichever phase it had reached; the killed
    # rank left no record, and its last phase is said
    assert summary["failed_at"]["node"] == 0 and second_address in summary["error"], summary
    assert summary["silent_ranks"] == [{"rank": 1, "phase": "train"}], summary.get("silent_ranks")
    assert "No record from rank 1 (last in phase train): killed, or its node lost" in summary["error"]
    _kept(run_dir, summary, steps)


def test_two_node_rank_failure_stops_the_other_node_within_seconds(slurm_run):
    """A reward that raises on rank 1 only (node 1), at its 4th call: node 0's rank is told through the heartbeat
    and stops within seconds (not at its next collective's timeout), and the run's error is rank 1's own."""
    driver, run_dir = slurm_run(*FAULT_RUN, "+data.rewards.fail._target_=tests.memory_hog.fail_on_rank",
                                "+data.rewards.fail.rank=1", "+data.rewards.fail.at_call=4")  # fmt: skip
    code, out = _ended(driver, 300)
    summary = rundir.read_summary(run_dir)
    records = {r["rank"]: r for r in outcome.read_records(run_dir)}
    assert code == outcome.EXIT_FAILED and summary["status"] == "failed", out[-3000:]
    assert "reward failed on purpose on rank 1" in summary["error"] and summary["failed_at"]["node"] == 1
    assert summary["failed_at"]["phase"] == "reward"
    assert records[0]["time"] - records[1]["time"] < 5, "node 0 outlived node 1's failure"
    print(f"[figure] rank 1 failed: node 0 stopped {records[0]['time'] - records[1]['time']:.2f} s later")
    assert summary["global_step"] >= 3 and _steps(run_dir) >= 3 and rundir.latest_checkpoint(run_dir) is not None


def test_two_node_slowed_link_crawls_but_completes(cli):
    """Node 1's link slowed to 300 kbit/s (tc tbf): each step's all-reduce of the 0.4 MB of gradients now takes longer
    than watchdog.heartbeat_s, and the run still completes: the heartbeats get through the slow link between the
    bulk packets (tbf's queue holds at most 2 s), so neither they nor the stall watchdog call it a hang."""
    (_, _), (second, _) = nodes()
    with link_slowed(second, "300kbit"):
        result, run_dir = cli(*SLURM, "topology=cpu2x1", "trainer.max_steps=1", f"watchdog.heartbeat_s={HEARTBEAT_S}",
                              "watchdog.stall_s=120", timeout=600)  # fmt: skip
    summary = rundir.read_summary(run_dir)
    assert result.returncode == 0 and summary["status"] == "completed", result.stdout[-3000:]
    assert summary["global_step"] == 1 and not (run_dir / rundir.STACKS).exists()
    # unslowed, a step's train phase takes ~0.1 s; here it is longer than the heartbeat bound
    assert summary["time/train_s"] > HEARTBEAT_S, f"the train phase took {summary['time/train_s']:.1f} s"
    print(f"[figure] slowed link: its train phase {summary['time/train_s']:.1f} s, the run {summary['wall_s']:.0f} s")


def test_two_node_node_down_requeues_and_resumes_on_both_nodes(slurm_run):
    """SLURM takes node 1 down under a running ZeRO-2 job (`scontrol update nodename=... state=down`): SLURM requeues
    it (max_requeues allows one); once the node is back, the next attempt resumes from the last checkpoint on both
    nodes, each rank its optimizer shard, and completes every step."""
    (_, _), (second, _) = nodes()
    steps = 8
    driver, run_dir = slurm_run(
        "deepspeed=zero2",  # each rank's optimizer shard saved, and loaded back on its node
        f"trainer.max_steps={steps}", PACED, "trainer.save_strategy=steps", "trainer.save_steps=2",
        "launcher.slurm.max_requeues=1", f"watchdog.heartbeat_s={HEARTBEAT_S}")  # fmt: skip
    until(lambda: rundir.latest_checkpoint(run_dir) or driver.poll() is not None, 240, "a checkpoint")
    job = rundir.read_summary(run_dir)["slurm_job_id"]
    subprocess.run(["scontrol", "update", f"NodeName={second}", "State=DOWN", "Reason=grpo_exp_test"], check=True)
    try:
        until(lambda: _squeue(job) in ("PENDING", "") or driver.poll() is not None, 120, "the job to leave its nodes")
    finally:  # (ReturnToService=2: a node whose slurmd answers is back at once; RESUME is for one that is not)
        subprocess.run(["scontrol", "update", f"NodeName={second}", "State=RESUME"], capture_output=True)
    deadline = time.time() + 420
    while driver.poll() is None and time.time() < deadline:
        if _squeue(job, "%r") == "BeginTime":  # a requeued job waits ~2 minutes: the cluster's policy
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True)
        time.sleep(1)
    code, out = _ended(driver, 60)
    summary = rundir.read_summary(run_dir)
    assert code == 0 and summary["status"] == "completed" and summary["global_step"] == steps, out[-3000:]
    assert summary["resumes"][0]["from_step"] >= 2 and summary["runtime"]["world_size"] == 2, summary
    assert summary["runtime"]["zero_stage"] == 2 and summary["runtime"]["hosts"] == [n for n, _ in nodes()]
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == list(range(1, steps + 1))
    print(f"[figure] node down: requeued, resumed from step {summary['resumes'][0]['from_step']}, {steps} of {steps}")


def _squeue(job: str, field: str = "%T") -> str:
    return subprocess.run(["squeue", "-h", "-j", str(job), "-o", field], capture_output=True, text=True).stdout.strip()


def test_two_node_cluster_script_is_idempotent():
    """A second run of scripts/slurm_local.sh finds the cluster up and leaves it as it was."""
    before = nodes()
    done = subprocess.run(["bash", str(REPO / "scripts" / "slurm_local.sh")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "slurm ready: nodes node1 node2" in done.stdout, done.stdout + done.stderr
    listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %o"], capture_output=True, text=True).stdout.split()
    assert sorted(zip(listed[::2], listed[1::2], strict=True)) == before


# The docs' two-host sessions, each command on its node.


def two_host_sessions() -> list[list[tuple[str, list[str], list[str]]]]:
    """docs/multi-node.md's blocks of `nodeN$ python -m grpo_exp ...` commands: per block, [(node, its arguments, the
    lines shown after it)]; a block's commands run together, each on its node. Lines with `...` are abridged."""
    from tests.test_docs import fenced_blocks

    sessions = []
    for lang, text in fenced_blocks(REPO / "docs" / "multi-node.md"):
        if lang != "console" or not re.match(r"node\d\$ ", text):
            continue
        session = []
        for line in text.rstrip("\n").split("\n"):
            if command := re.match(r"(node\d)\$ python -m grpo_exp (.*)", line):
                session.append((command.group(1), shlex.split(command.group(2)), []))
            elif "..." not in line:
                session[-1][2].append(line)
        sessions.append(session)
    return sessions


def test_two_node_docs_show_what_each_host_prints(background_driver, tmp_path):
    """The multi-node docs' own commands, each on its host: one driver per node with node 0's real address as
    topology.master_addr trains across the link; a node given an address no host has is refused before launch."""
    sessions = two_host_sessions()
    assert len(sessions) >= 2, "docs/multi-node.md shows no two-host session"
    for number, session in enumerate(sessions):
        run_dir = tmp_path / f"session{number}"
        started = []
        for name, args, shown in session:  # the page's shared run dir, here
            args = [f"hydra.run.dir={run_dir}" if a.startswith("hydra.run.dir=") else a for a in args]
            started.append((name, shown, background_driver(*args, env={"COLUMNS": "100"}, wrap=in_node(name))))
        for name, shown, driver in started:
            _, out = _ended(driver, 300)
            printed = {" ".join(line.replace(sys.executable, "python").split()) for line in out.splitlines()}
            stale = [line for line in shown if line.strip() and " ".join(line.split()) not in printed]
            assert "Traceback" not in out and not stale, f"{name}: lines it no longer prints: {stale}\n{out[-2000:]}"
        if len(session) == 2:  # a driver per node, node 0's real address: they trained together, each on its host
            (first, _), (second, _) = nodes()
            summary = rundir.read_summary(run_dir)
            assert summary["status"] == "completed" and summary["runtime"]["hosts"] == [first, second], summary
            assert rundir.read_summary(run_dir / rundir.node_subdir(1))["status"] == "completed"
