"""The driver's job (launching/job.py) in-process: a run dir belongs to one run, its ports are free."""

import socket
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo_exp.config import overrides
from grpo_exp.core import outcome, rundir
from grpo_exp.launching import job, ports
from tests.helpers import check, compose_cfg, run_job, start_driver


def test_a_dir_holding_only_a_plan_can_be_run_in(tmp_path):
    from grpo_exp.launching.job import reused_run_dir

    assert rundir.holds_run(tmp_path / "nothing") is None and reused_run_dir(tmp_path / "nothing") is None
    outcome.write_status(tmp_path, "planned", fits=True)  # what a planning sweep's trial leaves
    assert rundir.holds_run(tmp_path) is None and reused_run_dir(tmp_path) is None
    outcome.write_status(tmp_path, "completed")
    assert rundir.holds_run(tmp_path)["status"] == "completed" and reused_run_dir(tmp_path).key == "hydra.run.dir"


@pytest.mark.slow  # the CLI in subprocesses (~2.5 s): make test
def test_default_dirs_are_unique_for_runs_started_in_the_same_second(tmp_path):
    procs = [
        start_driver(tmp_path, tmp_path, "action=plan", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(3)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    dirs = sorted((tmp_path / "outputs" / "default").iterdir())
    assert len(dirs) == 3 and all((d / rundir.PLAN).is_file() for d in dirs)


def vllm_command(*overrides) -> str:
    plan, problems = check(compose_cfg("model=qwen7b", "vllm=server", "action=plan", *overrides), Path("/x"), gpus=0)
    assert problems == []
    return " ".join(next(n.commands["vllm"] for n in plan.nodes if "vllm" in n.commands))


def test_vllm_server_listens_only_where_trainers_are():
    assert "--host 127.0.0.1" in vllm_command("topology=1x2")  # every trainer on its node
    assert "--host 10.1.2.3" in vllm_command("topology=2x8", "topology.master_addr=10.1.2.3")  # the cluster network
    assert "--host 10.9.9.9" in vllm_command("topology=1x2", "vllm.server_bind=10.9.9.9")  # asked for
    assert not any("0.0.0.0" in a for a in vllm_command("topology=2x8", "topology.master_addr=10.1.2.3"))


def test_auto_ports_are_free_numbers_before_the_config_is_frozen():
    cfg = compose_cfg("model=qwen7b", "topology=1x2", "vllm=server", "action=plan")
    check(cfg, Path("/x"), gpus=0)
    assert isinstance(cfg.vllm.server_port, int) and isinstance(cfg.vllm.group_port, int)
    assert cfg.vllm.server_port != cfg.vllm.group_port and ports.is_free(cfg.vllm.server_port)
    assert f"--port {cfg.vllm.server_port}" in vllm_command("topology=1x2", f"vllm.server_port={cfg.vllm.server_port}")
    multi = compose_cfg("model=qwen7b", "topology=2x8", "vllm=server", "action=plan")
    check(multi, Path("/x"), gpus=0)
    assert (multi.vllm.server_port, multi.vllm.group_port) == (8000, 51216)  # every node must agree: TRL's defaults


def test_finalize_resolves_every_interpolation_after_the_values_it_fills_in():
    """finalize resolves the config in place once it is final, so the checks, the plan and config.yaml read plain
    values: an interpolation of a value finalize fills in (an `auto` port) reads the value chosen, not `auto`."""
    cfg = compose_cfg("model=qwen7b", "topology=1x2", "vllm=server", "action=plan", "run_name=port${vllm.server_port}")
    assert OmegaConf.is_interpolation(cfg, "run_name") and cfg.vllm.server_port == ports.AUTO
    assert job.finalize(cfg, set()) == []
    assert cfg.run_name == f"port{cfg.vllm.server_port}" and isinstance(cfg.vllm.server_port, int)
    assert not OmegaConf.is_interpolation(cfg, "run_name") and not OmegaConf.is_interpolation(cfg.topology, "node_rank")


def test_an_interpolation_that_does_not_resolve_or_mistypes_stops_finalize_by_its_key(monkeypatch):
    monkeypatch.delenv("GRPO_EXP_UNSET", raising=False)
    unset = compose_cfg("run_name=${oc.env:GRPO_EXP_UNSET}")
    assert [p.key for p in job.finalize(unset, set())] == ["run_name"]
    mistyped = compose_cfg("peft.target_modules=${seed}")
    assert [p.key for p in job.finalize(mistyped, set())] == ["peft.target_modules"]


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


def test_busy_master_port_stops_node_0_before_launch(tmp_path, held_port, capsys):
    overrides = ("logger=none", "topology=cpu2x1", "topology.node_rank=0", f"topology.master_port={held_port}")
    ended = run_job(*overrides, run_dir=tmp_path / "run")
    err = capsys.readouterr().err
    assert ended.code == 2 and "Traceback" not in err
    assert f"topology.master_port: port {held_port} is already in use" in err and "topology.master_port=" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("batch", [256, 768, 2048])
def test_the_frontier_sweeper_and_calibrate_get_the_drivers_verdict(batch, tmp_path):
    """job.verdict (the frontier sweeper's per-trial plan, calibrate's re-plan of a measured run) is the driver's
    plan: finalized as a run is, so a deprecated alias counts. At batch 768 a plan that skipped finalizing
    (the old planner.plan_and_estimate) read trainer.gradient_checkpointing=true as no checkpointing: 3.27 GiB,
    OOM, where the driver plans 2.77 GiB and runs it."""
    import json

    given = [
        "trainer.gradient_checkpointing=true",
        f"trainer.per_device_train_batch_size={batch}",
        "trainer.num_generations=8",
        f"data.num_samples={batch}",
        "memory.limit_gib=3",
    ]
    ended = run_job(*given, "action=plan", run_dir=tmp_path / "run")
    driver = json.loads((tmp_path / "run" / "plan.json").read_text())
    _, memory, problems = job.verdict(compose_cfg(*given), 0, set(overrides.values(given)))
    assert ended.code == 0 and problems == []
    assert (memory.fits, memory.train["peak_gib"]) == (driver["fits"], driver["train"]["peak_gib"])
    assert memory.fits == (batch <= 768)
    frozen = OmegaConf.load(tmp_path / "run" / "config.yaml")  # what calibrate plans again, once the run ran
    _, again, _ = job.verdict(frozen, 0, config_path=tmp_path / "run" / "config.yaml", frozen=True)
    assert (again.fits, again.train["peak_gib"]) == (driver["fits"], driver["train"]["peak_gib"])
