"""launcher=slurm on a real SLURM cluster: the two-node cluster scripts/slurm_local.sh sets up (.ci/run runs it where
it can); the single-node jobs here land on either node. Skipped, with the reason, where no cluster answers."""

import contextlib
import shutil
import signal
import subprocess
import time

import pytest

from grpo_exp.core import outcome, rundir
from grpo_exp.launching.launchers.slurm import jobs as slurm
from tests.helpers import compose_cfg, kill_all, slurm_problem


@pytest.fixture
def needs_cluster():
    if (problem := slurm_problem()) is not None:
        pytest.skip(f"real SLURM: {problem}")


# Two nodes on 2 CPUs: its tests run one after another on one xdist worker (make test: --dist loadgroup).
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("needs_cluster"), pytest.mark.xdist_group("slurm")]
SLURM = [
    "launcher=slurm",
    "launcher.slurm.cpus_per_task=1",
    "launcher.slurm.time_min=10",
    "logger=none",
    "topology.cpu_procs=1",
]


def _squeue(job_id: str, field: str = "%T") -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", field], capture_output=True, text=True).stdout.strip()


def _sbatch(*args: str) -> str:
    """A plain batch job (sbatch --wrap), beside grpo_exp, its output nowhere unless `args` say: its id."""
    output = [] if any(a.startswith("--output") for a in args) else ["--output=/dev/null"]
    done = subprocess.run(
        ["sbatch", "--parsable", *output, *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip().split(";")[0]


def _until(condition, timeout: float, what: str, step: float = 0.5) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(step)


def _release_held(job_id: str) -> None:
    """A requeued job waits ~2 minutes (BeginTime), the cluster's policy: let it start now, once every process
    of its last attempt is gone (a start while the old one still tears down has its credential revoked)."""
    import psutil

    if _squeue(job_id, "%r") != "BeginTime":
        return
    old = [p for p in psutil.process_iter(["cmdline"]) if f"[{job_id}." in " ".join(p.info["cmdline"] or [])]
    if not old:  # slurmstepd's title names the job's steps: "slurmstepd: [<id>.batch]"
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)


@contextlib.contextmanager
def _node_down(node: str):
    """A node of this cluster marked down by an admin, and back up after."""
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=grpo_exp_test"], check=True)
    try:
        yield
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True)
        _until(lambda: _node_state(node) in ("idle", "mixed", "allocated"), 60, "the node to come back")


def _node_state(node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True).stdout.strip()


@pytest.fixture
def quick_watch(monkeypatch):
    """The driver asks SLURM every STATE_POLL_S and gives a result file RESULT_GRACE_S: shortened, so a
    vanished job is noticed within a second or two here."""
    monkeypatch.setattr(slurm, "STATE_POLL_S", 0.5)
    monkeypatch.setattr(slurm, "RESULT_GRACE_S", 1.0)


def _watched(tmp_path, job_id: str, max_requeues: int = 0):
    """What the driver holds for a submitted job: submitit's handle on it (no result file will come) and
    the run dir its end is written to."""
    import submitit

    run_dir = tmp_path / f"run{job_id}"
    run_dir.mkdir()
    return slurm.Submitted(submitit.SlurmJob(tmp_path / "slurm", job_id), run_dir, max_requeues)


def test_what_slurm_says_of_a_job_without_accounting():
    """sacct fails on this cluster (no accounting): scontrol and squeue answer, and a job no tool knows any
    more (purged) is GONE."""
    job_id = _sbatch("--wrap", "sleep 60")
    try:
        _until(lambda: slurm.job_state(job_id).state == "RUNNING", 60, "the job to run")
        subprocess.run(["scancel", job_id], check=True)
        _until(lambda: slurm.job_state(job_id).ended, 30, "the job to end")
        assert slurm.job_state(job_id).state == "CANCELLED"
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    assert slurm.job_state("987654321") == slurm.JobState(slurm.GONE)


@pytest.mark.parametrize("way", ["cancelled by an admin", "failed to start", "node failure", "purged"])
def test_a_job_that_vanished_ends_the_wait_with_slurms_state_and_reason(tmp_path, quick_watch, way):
    """The driver never outwaits its job: however SLURM ended it without a result, the wait ends within a
    poll or two and summary.json says failed, with SLURM's state and reason."""
    if way == "cancelled by an admin":
        job_id = _sbatch("--wrap", "sleep 120")
        _until(lambda: _squeue(job_id) == "RUNNING", 60, "the job to run")
        subprocess.run(["scancel", job_id], check=True)
        expected = ("CANCELLED", None)
    elif way == "failed to start":
        job_id = _sbatch("--output=/nonexistent/grpo_exp/out", "--no-requeue", "--wrap", "true")  # cannot open it
        expected = ("FAILED", "JobLaunchFailure")
    elif way == "node failure":  # its node marked down under it (no requeue asked: SLURM does not requeue it)
        job_id = _sbatch("--no-requeue", "--wrap", "sleep 120")
        _until(lambda: _squeue(job_id) == "RUNNING", 60, "the job to run")
        with _node_down(_squeue(job_id, "%N")):
            _until(lambda: slurm.job_state(job_id).state == "NODE_FAIL", 30, "NODE_FAIL")
        expected = ("NODE_FAIL", "NodeDown")
    else:  # a job slurmctld forgot (MinJobAge) on a cluster without accounting
        job_id, expected = "987654321", (slurm.GONE, None)
    watched = _watched(tmp_path, job_id)
    if way == "node failure":  # node 0 had said why it was ending the run (its serving node's server lost)
        outcome.ending(watched.run_dir, "the vLLM server on the serving node stopped answering")
    started = time.time()
    [(_, code)] = slurm.wait([watched])
    assert code == outcome.EXIT_FAILED and time.time() - started < 30
    summary = rundir.read_summary(watched.run_dir)
    assert summary["status"] == "failed" and summary["exit_code"] == outcome.EXIT_FAILED
    assert (summary["slurm_state"], summary["slurm_reason"]) == expected
    assert f"SLURM job {job_id}" in summary["error"]
    if way == "node failure":  # the cause first, then SLURM's end of the job
        assert summary["error"].startswith("the vLLM server on the serving node stopped answering; then SLURM job")
    else:
        assert "without a result" in summary["error"] or "left no result" in summary["error"]


def test_a_job_that_failed_to_start_is_requeued_where_max_requeues_allows(tmp_path, quick_watch):
    """A launch failure is not the job's doing: the driver requeues it (one attempt of max_requeues) and
    waits again; when the next attempt fails too and no requeue is left, the run ends failed, both
    attempts recorded."""
    import threading

    job_id = _sbatch("--output=/nonexistent/grpo_exp/out", "--requeue", "--wrap", "true")
    watched = _watched(tmp_path, job_id, max_requeues=1)
    waited = threading.Event()

    def release():  # the wait holds the main thread (it handles SIGTERM there): requeued attempts start from here
        while not waited.wait(0.5):
            _release_held(job_id)

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        ended = slurm.wait([watched])
    finally:
        waited.set()
        subprocess.run(["scancel", job_id], capture_output=True)
    [(_, code)] = ended
    summary = rundir.read_summary(watched.run_dir)
    assert code == outcome.EXIT_FAILED and watched.requeued == 1
    assert [a["reason"] for a in summary["slurm_lost_attempts"]] == ["JobLaunchFailure", "JobLaunchFailure"]


def test_a_failing_run_brings_its_status_and_exit_code_back(cli, tmp_path, model_cache, monkeypatch):
    """A model that passes the driver's checks and fails in the worker while loading (as in test_e2e)."""
    # imported here: build imports trl, which sets VLLM_LOGGING_LEVEL=ERROR in this process's environment when it is
    # unset, and the vLLM lane collects this module (test_slurm_server.py): its drivers would inherit it
    from grpo_exp.training import build

    monkeypatch.setenv("GRPO_EXP_CACHE", str(model_cache))
    broken = tmp_path / "broken_model"
    shutil.copytree(build.model_path(compose_cfg()), broken)
    (broken / "config.json").write_text('{"model_type": "no_such_architecture"}')
    result, run_dir = cli(*SLURM, f"model.name_or_path={broken}")
    summary = rundir.read_summary(run_dir)
    assert result.returncode == outcome.EXIT_FAILED, result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["status"] == "failed" and "no_such_architecture" in summary["error"]


def test_an_oom_trial_is_a_result_and_trials_run_at_the_same_time(cli):
    """A 2-trial sweep as concurrent jobs (2 CPUs: both at once); one trial OOMs on purpose."""
    result, sweep_dir = cli(
        *SLURM,
        "trainer.max_steps=2",
        "memory.limit_gib=3",
        "launcher.slurm.max_parallel=2",
        "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
        "+data.rewards.hog.only_rank=0",
        "+data.rewards.hog.gib=0,8",
        multirun=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summaries = [rundir.read_summary(d) for d in sorted(p.parent for p in sweep_dir.glob("*/summary.json"))]
    assert len(summaries) == 2
    statuses = sorted(s["status"] for s in summaries)
    assert statuses == ["completed", "oom"], statuses
    assert "oom" in result.stdout and "completed" in result.stdout  # the sweep's table
    spans = sorted((s["started_at"], s["ended_at"]) for s in summaries)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False)), f"no two trials overlapped: {spans}"


def test_frontier_bisects_its_lines_concurrently(cli):
    """The frontier sweeper launches one probe per num_generations line per round: on SLURM they
    run as concurrent jobs, and the frontier is the same as one at a time (tests/e2e/test_sweeps.py)."""
    import json

    result, sweep_dir = cli(
        *SLURM,
        "trainer.max_steps=1",
        "memory.limit_gib=5",
        "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
        "+data.rewards.hog.gib_per_unit=0.15",
        "+sweep=frontier",
        "hydra.sweeper.batch_values=[4,8,16]",
        "hydra.sweeper.axis_values=[2,4]",
        multirun=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads((sweep_dir / "frontier.json").read_text())["frontier"] == {"2": 8, "4": 4}
    summaries = [rundir.read_summary(p.parent) for p in sweep_dir.glob("*/summary.json")]
    spans = sorted((s["started_at"], s["ended_at"]) for s in summaries if s.get("started_at"))
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False)), f"no two trials overlapped: {spans}"


def test_wait_false_returns_at_once_and_compare_follows_the_job(cli):
    """launcher.slurm.wait=false: the driver submits, prints the job id and run dir, and returns;
    the job concludes its own summary, and compare reads the dir while and after it runs."""
    from grpo_exp.results import compare

    started = time.time()
    result, run_dir = cli(*SLURM, "trainer.max_steps=2", "launcher.slurm.wait=false")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    job_id = rundir.read_summary(run_dir)["slurm_job_id"]
    assert f"submitted SLURM job {job_id}: {run_dir}" in result.stdout
    assert time.time() - started < 30 and rundir.read_summary(run_dir)["status"] == "running"
    assert [run.status for run in compare.load_local(run_dir)] == ["running"]
    deadline = time.time() + 300
    while rundir.read_summary(run_dir).get("status") == "running" and time.time() < deadline:
        time.sleep(1)
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2 and summary["exit_code"] == 0
    assert [run.status for run in compare.load_local(run_dir)] == ["completed"]


def test_a_stopped_driver_cancels_its_job(background_driver, tmp_path):
    """Stopped while the job trains: scancel's SIGTERM reaches the ranks, which save and end `preempted`, as
    for a time-limit warning. Node 0's task must not requeue a job SLURM is ending (it did: the cancelled job
    came back PENDING and trained on without its driver)."""
    run_dir = tmp_path / "run"
    driver = background_driver(
        *SLURM,
        "trainer.max_steps=10000",
        "+data.rewards.paced._target_=tests.memory_hog.paced",
        "launcher.slurm.max_requeues=2",
        f"hydra.run.dir={run_dir}",
    )
    try:
        _until(lambda: rundir.read_metrics(run_dir) or driver.poll() is not None, 240, "a step")
        job_id = rundir.read_summary(run_dir).get("slurm_job_id")
        assert job_id and rundir.read_metrics(run_dir), "the job never trained"
        driver.send_signal(signal.SIGTERM)
        time.sleep(1)
        driver.send_signal(signal.SIGINT)  # a user's Ctrl-C while the job is cancelled: said, no traceback
        assert driver.wait(timeout=60) == outcome.EXIT_INTERRUPTED
        printed = driver.stdout.read()
        assert "Traceback" not in printed and rundir.read_summary(run_dir)["status"] != "running", printed[-3000:]
        # COMPLETING while the task concludes (SLURM's KillWait bounds it), then CANCELLED, or PENDING if requeued
        deadline = time.time() + 90
        while time.time() < deadline and _squeue(job_id) not in ("", "CANCELLED", "PENDING"):
            time.sleep(1)
        assert _squeue(job_id) in ("", "CANCELLED"), f"job {job_id} outlived its driver: {_squeue(job_id)}"
        assert "slurm_restarts" not in rundir.read_summary(run_dir), rundir.read_summary(run_dir)
    finally:
        subprocess.run(["scancel", str(rundir.read_summary(run_dir).get("slurm_job_id", "0"))], capture_output=True)


def test_a_job_warned_of_its_time_limit_requeues_and_resumes_to_the_final_step(background_driver, tmp_path):
    """SLURM's time-limit warning is SIGUSR2 to every process of the job's steps (`--signal=USR2@<s>`,
    which test_slurm checks in the sbatch script); `scancel --signal=USR2` delivers exactly that, now
    rather than minutes in. The ranks save, node 0's task requeues the job, the next attempt resumes
    from the checkpoint. A paced reward (0.4 s a step) keeps the run going until the signal arrives.
    Every wait is bounded by the driver's own end; the requeued job is let start once its last attempt is
    gone (the machine may be busy: CI shares it)."""
    steps = 40
    run_dir = tmp_path / "run"
    driver = background_driver(
        *SLURM,
        f"trainer.max_steps={steps}",
        "+data.rewards.paced._target_=tests.memory_hog.paced",
        "launcher.slurm.max_requeues=2",
        "preemption.grace_s=20",
        f"hydra.run.dir={run_dir}",
    )
    try:
        _until(lambda: len(rundir.read_metrics(run_dir)) >= 3 or driver.poll() is not None, 240, "3 steps")
        job_id = rundir.read_summary(run_dir).get("slurm_job_id")
        assert job_id and len(rundir.read_metrics(run_dir)) >= 3, "the job never trained"
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        deadline = time.time() + 420
        while driver.poll() is None and time.time() < deadline:
            _release_held(job_id)
            time.sleep(1)
        assert driver.wait(timeout=60) == 0, driver.stdout.read()[-3000:]
    finally:
        subprocess.run(["scancel", str(rundir.read_summary(run_dir).get("slurm_job_id", "0"))], capture_output=True)
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == steps, summary
    assert summary["started_at"] < summary["ended_at"] and list((run_dir / rundir.SLURM).glob("*_log.out"))
    # one requeue for the warning, and one more for each attempt SLURM lost on the way (recorded as such)
    assert summary["slurm_restarts"] == 1 + len(summary.get("slurm_lost_attempts", [])), summary
    assert [r["from_step"] for r in summary["resumes"]][0] >= 3, summary
    assert [m["step"] for m in rundir.read_metrics(run_dir)] == list(range(1, steps + 1))


def test_a_job_killed_under_the_driver_ends_the_run_within_a_poll_with_slurms_state(background_driver, tmp_path):
    """Through the driver: the job's own processes are SIGKILLed, as the kernel's OOM killer or a crash takes
    them (SLURM's own stops come as SIGTERM first, which a run answers by saving: preempted), so nothing writes
    a result. The driver does not wait for a time limit: it ends the run failed with SLURM's state within a
    poll (max_requeues=0: nothing requeues it)."""
    import psutil

    run_dir = tmp_path / "run"
    driver = background_driver(
        *SLURM,
        "trainer.max_steps=10000",
        "+data.rewards.paced._target_=tests.memory_hog.paced",
        "launcher.slurm.max_requeues=0",
        f"hydra.run.dir={run_dir}",
    )
    try:
        _until(lambda: rundir.read_metrics(run_dir) or driver.poll() is not None, 240, "a step")
        job_id = rundir.read_summary(run_dir).get("slurm_job_id")
        assert job_id and rundir.read_metrics(run_dir), "the job never trained"
        job = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
        kill_all(p for p in job if p.pid != driver.pid)  # the job's task, torchrun and worker
        killed = time.time()
        code = driver.wait(timeout=slurm.STATE_POLL_S + slurm.RESULT_GRACE_S + 60)
    finally:
        subprocess.run(["scancel", str(rundir.read_summary(run_dir).get("slurm_job_id", "0"))], capture_output=True)
    assert code == outcome.EXIT_FAILED and time.time() - killed < slurm.STATE_POLL_S + slurm.RESULT_GRACE_S + 30
    summary = rundir.read_summary(run_dir)
    assert (summary["status"], summary["slurm_state"]) == ("failed", "FAILED"), summary
    assert f"SLURM job {job_id} ended FAILED" in summary["error"] and "without a result" in summary["error"]


def test_a_job_slurm_would_refuse_is_refused_before_launch(cli):
    """sbatch --test-only on the script submitit would submit: an unknown partition is exit 2 naming the key,
    nothing submitted, no run dir left."""
    result, run_dir = cli(*SLURM, "launcher.slurm.partition=no_such_partition")
    assert result.returncode == outcome.EXIT_INVALID and "Traceback" not in result.stderr
    assert "launcher.slurm.partition: SLURM refuses the job: invalid partition specified" in result.stderr
    assert not run_dir.exists()
