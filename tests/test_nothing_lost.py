"""Nothing lost, nothing exposed: a run dir belongs to one run, default dirs are unique, the vLLM
server listens only where trainers are, ports are chosen and checked before launch, a stopped
launcher=slurm driver cancels its job, and secrets never reach the run dir."""

import hashlib
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from grpo_exp.__main__ import check
from grpo_exp.core import outcome, rundir
from grpo_exp.launching import ports
from tests.conftest import SECRETS, compose_cfg, run_driver, start_driver


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.mark.e2e
def test_a_run_dir_belongs_to_one_run(one_rank_run, tmp_path, model_cache):
    """Another run started in the session's one-process run dir is refused before Hydra writes a byte."""
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stderr[-2000:]
    before = {
        p: md5(p)
        for p in [
            run_dir / rundir.METRICS,
            run_dir / rundir.SUMMARY,
            run_dir / rundir.CONFIG,
            run_dir / ".hydra" / "overrides.yaml",
        ]
    }
    again = run_driver(tmp_path, model_cache, "logger=none", "topology.cpu_procs=1", f"hydra.run.dir={run_dir}")
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert (
        "hydra.run.dir:" in again.stderr
        and "already holds a run (status: completed)" in again.stderr
        and "resume=" in again.stderr
    )
    assert {p: md5(p) for p in before} == before  # nothing of the first run mixed or overwritten


def test_a_dir_holding_only_a_plan_can_be_run_in(tmp_path):
    from grpo_exp.__main__ import reused_run_dir

    assert rundir.holds_run(tmp_path / "nothing") is None and reused_run_dir(tmp_path / "nothing") is None
    outcome.write_status(tmp_path, "planned", fits=True)  # what a planning sweep's trial leaves
    assert rundir.holds_run(tmp_path) is None and reused_run_dir(tmp_path) is None
    outcome.write_status(tmp_path, "completed")
    assert rundir.holds_run(tmp_path)["status"] == "completed" and reused_run_dir(tmp_path).key == "hydra.run.dir"


def test_default_dirs_are_unique_for_runs_started_in_the_same_second(tmp_path):
    procs = [
        start_driver(tmp_path, tmp_path, "action=plan", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(3)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    dirs = sorted((tmp_path / "outputs" / "default").iterdir())
    assert len(dirs) == 3 and all((d / rundir.PLAN).is_file() for d in dirs)


@pytest.mark.e2e
def test_two_default_runs_side_by_side_both_complete(tmp_path, background_driver):
    runs = [background_driver("logger=none", "trainer.max_steps=1") for _ in range(2)]
    assert [p.wait(timeout=300) for p in runs] == [0, 0], [p.stdout.read()[-2000:] for p in runs]
    dirs = sorted((tmp_path / "outputs" / "default").iterdir())
    assert len(dirs) == 2 and all(rundir.read_summary(d)["status"] == "completed" for d in dirs)


# --- the vLLM server and ports -------------------------------------------------------------------


def vllm_command(*overrides) -> list[str]:
    plan, problems = check(compose_cfg("model=qwen7b", "vllm=server", "action=plan", *overrides), Path("/x"), gpus=0)
    assert problems == []
    return next(n.commands["vllm"] for n in plan.nodes if "vllm" in n.commands)


def test_vllm_server_listens_only_where_trainers_are():
    assert "--host=127.0.0.1" in vllm_command("topology=1x2")  # every trainer on its node
    assert "--host=10.1.2.3" in vllm_command("topology=2x8", "topology.master_addr=10.1.2.3")  # the cluster network
    assert "--host=10.9.9.9" in vllm_command("topology=1x2", "vllm.server_bind=10.9.9.9")  # asked for
    assert not any("0.0.0.0" in a for a in vllm_command("topology=2x8", "topology.master_addr=10.1.2.3"))


def test_auto_ports_are_free_numbers_before_the_config_is_frozen():
    cfg = compose_cfg("model=qwen7b", "topology=1x2", "vllm=server", "action=plan")
    check(cfg, Path("/x"), gpus=0)
    assert isinstance(cfg.vllm.server_port, int) and isinstance(cfg.vllm.group_port, int)
    assert cfg.vllm.server_port != cfg.vllm.group_port and ports.is_free(cfg.vllm.server_port)
    assert f"--port={cfg.vllm.server_port}" in vllm_command("topology=1x2", f"vllm.server_port={cfg.vllm.server_port}")
    multi = compose_cfg("model=qwen7b", "topology=2x8", "vllm=server", "action=plan")
    check(multi, Path("/x"), gpus=0)
    assert (multi.vllm.server_port, multi.vllm.group_port) == (8000, 51216)  # every node must agree: TRL's defaults


@pytest.fixture
def held_port():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


def test_busy_vllm_ports_are_named_on_the_server_node(held_port):
    cfg = compose_cfg(
        "model=qwen7b", "topology=1x2", "vllm=server", f"vllm.server_port={held_port}", "vllm.group_port=auto"
    )
    found = ports.check_busy(cfg, node_rank=0, server_node=0)
    assert [p.key for p in found] == ["vllm.server_port"] and f"port {held_port} is already in use" in found[0].why
    assert "vllm.server_port=" in found[0].fix
    assert ports.check_busy(cfg, node_rank=1, server_node=0) == []  # another node opens nothing


def test_busy_master_port_stops_node_0_before_launch(tmp_path, held_port, background_driver):
    proc = background_driver(
        "logger=none",
        "topology=cpu2x1",
        "topology.node_rank=0",
        f"topology.master_port={held_port}",
        f"hydra.run.dir={tmp_path / 'run'}",
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert f"topology.master_port: port {held_port} is already in use" in err and "topology.master_port=" in err
    assert not (tmp_path / "run").exists()


# --- stopping the driver ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_stopping_a_slurm_driver_cancels_its_job(tmp_path, background_driver):
    """submitit's local executor stands in for sbatch (tests/test_slurm_real.py has the real cluster,
    stopped by SIGTERM; here SIGHUP, a closed terminal: both take slurm.py's one handler)."""
    run_dir = tmp_path / "run"
    proc = background_driver(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=100000",
        "launcher=slurm",
        "launcher.slurm.cluster=local",
        f"hydra.run.dir={run_dir}",
        stdout=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    while not rundir.read_metrics(run_dir) and time.time() < deadline:
        time.sleep(0.5)
    assert rundir.read_metrics(run_dir), "the job never logged a step"
    job_processes = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=120) in (outcome.EXIT_INTERRUPTED, outcome.EXIT_PREEMPTED)
    gone, alive = psutil.wait_procs(job_processes, timeout=60)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    assert rundir.read_summary(run_dir)["status"] in ("interrupted", "preempted")


# --- secrets ------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_secrets_never_land_in_the_run_dir(one_rank_run):
    """The session's one-process run had SECRETS in its environment and W&B offline."""
    result, run_dir = one_rank_run
    assert result.returncode == 0, result.stderr[-2000:]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files) and (run_dir / rundir.PLAN).is_file()
    leaked = [str(p) for p in files for marker in SECRETS.values() if marker.encode() in p.read_bytes()]
    assert leaked == []
    assert json.loads((run_dir / rundir.PLAN).read_text())["nodes"][0]["env"][
        "train"
    ]  # the per-node env is there, without secrets
