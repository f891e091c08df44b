"""Memory telemetry through real 2-rank GRPO runs: per-phase host peaks over ranks in metrics.jsonl,
summary.json and the offline W&B run; a forced OOM becomes a recorded result."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from grpo_exp.core import metrics, outcome, rundir
from grpo_exp.results import calibrate, compare, wandb_file
from tests.helpers import driver_env, planned, report

pytestmark = pytest.mark.e2e
STATS = ("", "_mean", "_min", "_argmax_rank")


def test_two_rank_run_logs_per_phase_peaks_everywhere(two_rank_run):
    result, run_dir = two_rank_run  # beta > 0 adds the reference-model scoring phase
    assert result.returncode == 0, result.stdout[-3000:]
    metrics = rundir.read_metrics(run_dir)
    assert len(metrics) == 2
    for step in metrics:
        for phase in ("generate", "reward", "score", "train", "optimizer"):
            key = f"memory/{phase}/host_rss_max_gib"
            peak, mean, low, rank = (step[key + s] for s in STATS)
            assert peak >= mean >= low > 0.05, (key, peak, mean, low)  # a torch process holds >50 MiB
            assert rank in (0, 1)
    summary = rundir.read_summary(run_dir)
    run_peak = summary["memory/peak/train/host_rss_max_gib"]
    assert run_peak == max(v for m in metrics for k, v in m.items() if k.endswith("/host_rss_max_gib"))

    wandb_run = wandb_file.read_run(wandb_file.find_run_file(run_dir))
    assert wandb_run.exit_code == 0
    assert wandb_run.summary["status"] == "completed"
    assert wandb_run.summary["memory/peak/train/host_rss_max_gib"] == run_peak
    logged = [row for row in wandb_run.history if "train/memory/train/host_rss_max_gib" in row]
    assert [row["train/memory/train/host_rss_max_gib"] for row in logged] == [
        m["memory/train/host_rss_max_gib"] for m in metrics
    ]
    for step in metrics:  # the node's RAM: both ranks' RSS added up, in every phase
        for phase in ("generate", "reward", "score", "train", "optimizer"):
            rank_peak = step[f"memory/{phase}/host_rss_max_gib"]
            assert rank_peak < step[f"memory/{phase}/node_rss_max_gib"] <= 2 * rank_peak
    assert "model:tiny" in wandb_run.tags and wandb_run.group == "default"
    assert wandb_run.config["trainer"]["beta"] == 0.04 and "trainer.beta=0.04" in wandb_run.config["overrides"]


def test_forced_oom_on_one_rank_is_a_result(cli):
    result, run_dir = cli(
        "memory.limit_gib=4",
        "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
        "+data.rewards.hog.gib=8",  # more than the cap, on rank 1 only
        "+data.rewards.hog.only_rank=1",
    )
    assert result.returncode == outcome.EXIT_OOM == 4
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "oom" and summary["exit_code"] == 4
    assert summary["oom"]["phase"] == "reward"
    assert summary["oom"]["rank"] == 1
    assert summary["oom"]["requested_bytes"] == 8 * 2**30
    assert "VmData" in summary["oom"]["snapshot"]
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]

    wandb_run = wandb_file.read_run(wandb_file.find_run_file(run_dir))
    assert wandb_run.exit_code == 4  # the run was finished, with its summary
    assert wandb_run.summary["status"] == "oom" and wandb_run.summary["oom"]["phase"] == "reward"


def test_on_oom_fit_turns_a_predicted_oom_into_a_run_that_completes(cli, tmp_path):
    """512 completions per micro-batch under a 2 GiB cap (one process: no gloo, which needs more):
    predicted OOM, and it does run out of memory when run anyway; preflight.on_oom=fit keeps 512 per
    optimizer step in smaller micro-batches and completes."""
    big = [
        "trainer.per_device_train_batch_size=512",
        "trainer.num_generations=4",
        "topology.cpu_procs=1",
        "memory.limit_gib=2",
        "data.num_samples=1024",
        "trainer.max_steps=1",
        "logger=none",
    ]
    anyway, oom_dir = cli(*big, "preflight.on_oom=warn", run_dir=tmp_path / "anyway")
    assert anyway.returncode == outcome.EXIT_OOM, anyway.stdout[-2000:] + anyway.stderr[-2000:]
    # an OOM keeps its record: the phases that finished before it, and what the dying phase reached
    died = rundir.read_summary(oom_dir)
    assert died[metrics.peak_phase("generate", "host_rss_max")] > 0
    assert died[metrics.peak_phase(died["oom"]["phase"], "host_rss_max")] > 0
    result, run_dir = cli(*big, "preflight.on_oom=fit", run_dir=tmp_path / "fitted")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 1
    trainer = rundir.load_config(run_dir / rundir.CONFIG).trainer
    assert trainer.per_device_train_batch_size * trainer.gradient_accumulation_steps == 512
    assert trainer.per_device_train_batch_size < 512
    assert {c["key"] for c in summary["preflight_fit"]} == {
        "trainer.per_device_train_batch_size",
        "trainer.gradient_accumulation_steps",
    }
    assert "preflight.on_oom=fit" in result.stderr + result.stdout


def test_calibrate_fits_factors_from_cpu_runs_and_the_planner_uses_them(cli, tmp_path, capsys):
    """Four measured CPU runs across batch size and completion length; the fitted factors bring
    the planner's train-phase error down, and preflight.calibration changes the plan."""
    import json

    result, sweep_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=1",
        "trainer.num_generations=4",
        "trainer.per_device_train_batch_size=16,128",
        "trainer.max_completion_length=16,64",
        multirun=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tmp_path / "calibration.json"
    assert calibrate.main([str(sweep_dir), "--out", str(out)]) == 0  # the commands in-process: their own code
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and data["stat"] == "host_rss_max" and len(data["runs"]) == 4
    before = sum(abs(r["error_before_pct"]) for r in data["runs"]) / 4
    after = sum(abs(r["error_after_pct"]) for r in data["runs"]) / 4
    assert after < before / 2 and after < 10, data  # measured: 45-67% before, within 3.2% after
    compare.main([str(sweep_dir), "--calibration", str(out), "--out", str(tmp_path / "cmp")])
    assert "calibrated" in capsys.readouterr().out  # the column: error after the factors
    plain = planned("trainer.per_device_train_batch_size=64").memory.train["peak_gib"]
    used = planned("trainer.per_device_train_batch_size=64", f"preflight.calibration={out}").memory
    assert used.train["peak_gib"] != pytest.approx(plain, rel=1e-3)
    text, _ = report("action=plan", f"preflight.calibration={tmp_path / 'missing.json'}")
    assert "preflight.calibration" in text


def _memory_cgroup(limit_bytes: int) -> Path | None:
    """A memory cgroup capped at `limit_bytes`, swap included (cgroup v1 or v2), or None where this machine lets
    none be made (not root, a read-only cgroupfs): the kernel's OOM killer acts on it as on a full node."""
    name = f"grpo_exp_test_{uuid.uuid4().hex[:8]}"
    v1 = Path("/sys/fs/cgroup/memory")
    try:
        if v1.is_dir():
            group = v1 / name
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
            if (group / "memory.memsw.limit_in_bytes").exists():
                (group / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            return group
        root = Path("/sys/fs/cgroup")
        if "memory" in (root / "cgroup.controllers").read_text().split():
            group = root / name
            group.mkdir()
            (group / "memory.max").write_text(str(limit_bytes))
            (group / "memory.swap.max").write_text("0")
            return group
    except OSError:
        return None
    return None


def test_a_rank_the_kernels_oom_killer_takes_is_a_host_oom_with_its_node_and_phase(model_cache, tmp_path):
    """The run in a 2.5 GiB memory cgroup (a node's RAM, in small); rank 1 writes 3 GiB in its reward function.
    The kernel SIGKILLs it: no Python error, yet the run ends oom (exit 4) naming the OOM killer, the node,
    the rank and its phase."""
    group = _memory_cgroup(2500 * 2**20)
    if group is None:
        pytest.skip("no memory cgroup can be made here (needs root and a writable /sys/fs/cgroup)")
    run_dir = tmp_path / "run"
    args = [
        "logger=none",
        "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
        "+data.rewards.hog.gib=3",
        "+data.rewards.hog.only_rank=1",
        "+data.rewards.hog.touch=true",  # resident: what the OOM killer counts
        f"hydra.run.dir={run_dir}",
    ]
    try:
        result = subprocess.run(
            [sys.executable, "-m", "grpo_exp", *args],
            cwd=tmp_path,
            env=driver_env(model_cache),
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        )
    finally:
        for _ in range(50):  # the cgroup goes once its last process has
            try:
                group.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.2)
    assert result.returncode == outcome.EXIT_OOM, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    oom = summary["oom"]
    assert summary["status"] == "oom" and (oom["kind"], oom["killed_by"]) == ("host", "oom_killer")
    assert (oom["node"], oom["rank"], oom["phase"]) == (0, 1, "reward") and oom["oom_kills"] >= 1
    assert "killed by the kernel's OOM killer" in summary["error"]
    assert "killed by the kernel's OOM killer on node 0" in result.stdout
