"""Sweeps on the tiny model under a memory cap: the grid survives an OOM cell, the frontier finds
the real boundary with fewer launches, Optuna maximises tokens/s, and compare reports it all."""

import json

import pytest
import yaml

from grpo_exp.core import rundir
from grpo_exp.results import compare, wandb_file

pytestmark = pytest.mark.e2e

# memory_hog asks for 0.15 GiB x batch x num_generations under a 5 GiB cap (a worker holds ~1.5):
# batch x generations <= 16 fits, >= 32 is an OOM in the reward phase.
CAPPED = [
    "topology.cpu_procs=1",
    "trainer.max_steps=1",
    "memory.limit_gib=5",
    "+data.rewards.hog._target_=tests.memory_hog.memory_hog",
    "+data.rewards.hog.gib_per_unit=0.15",
]


def test_grid_survives_an_oom_cell_and_compare_reports_it(cli, tmp_path):
    result, sweep_dir = cli(
        *CAPPED, "trainer.per_device_train_batch_size=4,8", "trainer.num_generations=2,4", multirun=True
    )
    assert result.returncode == 0, result.stdout[-3000:]
    summaries = {job: rundir.read_summary(sweep_dir / job) for job in "0123"}
    assert [summaries[j]["status"] for j in "0123"] == ["completed", "completed", "completed", "oom"]
    assert summaries["3"]["oom"]["phase"] == "reward" and summaries["3"]["exit_code"] == 4
    assert "sweep " in result.stdout and "oom" in result.stdout  # the sweep's own summary table

    runs = compare.load([str(sweep_dir)])
    assert compare.swept_keys(runs) == ["trainer.per_device_train_batch_size", "trainer.num_generations"]
    for row, job in zip(compare.rows(runs), "0123", strict=True):
        s = summaries[job]
        assert row["status"] == s["status"]
        assert row["peak GiB"] == s.get("memory/peak/train/host_rss_max_gib")
        assert row["tokens/s"] == s.get("throughput/tokens_per_s")
        assert row["plan GiB"] == s.get("plan/train/peak_gib")
    assert runs[0].summary["throughput/tokens_per_s"] > 0 and 0 < runs[0].summary["time/generate_share"] < 1

    out = compare.report([str(sweep_dir)], tmp_path / "report")
    png = out["heatmap"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    page = out["html"].read_text()
    assert 'class="plotly-graph-div"' in page and "trainer.per_device_train_batch_size" in page  # full key names
    table = page[page.index("<h2>runs</h2>") :]  # compare's table, below the figures and each run's facts
    assert all(f">{job}<" in table or f"{job} " in table for job in "0123")
    assert table.count("completed") == 3 and "oom" in table


def test_frontier_finds_the_boundary_with_fewer_launches(cli):
    result, sweep_dir = cli(
        *CAPPED,
        "+sweep=frontier",
        "hydra.sweeper.batch_values=[4,8,16]",
        "hydra.sweeper.axis_values=[2,4]",
        multirun=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    report = json.loads((sweep_dir / "frontier.json").read_text())
    assert report["frontier"] == {"2": 8, "4": 4}  # the true boundary: batch x generations <= 16
    assert report["launches"] < report["grid_size"] == 6
    fits = {(t["axis"], t["batch"]): t["fits"] for t in report["trials"]}
    assert fits[(2, 8)] and fits[(4, 4)] and not fits[(4, 8)] and not fits[(2, 16)]


def test_predicted_oom_trials_are_recorded_and_skipped(cli):
    result, sweep_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=1",
        "memory.limit_gib=4",  # the capacity planned against, whatever this machine's RAM
        "trainer.per_device_train_batch_size=4,16384",
        "data.num_samples=8192",
        multirun=True,
    )
    assert result.returncode == 0
    assert rundir.read_summary(sweep_dir / "0")["status"] == "completed"
    skipped = rundir.read_summary(sweep_dir / "1")
    assert skipped["status"] == "predicted_oom" and not (sweep_dir / "1" / "train.log").exists()


def test_optuna_maximises_throughput(cli):
    result, sweep_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=1",
        "+sweep=optuna",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=0",
        "hydra.sweeper.params={trainer.per_device_train_batch_size:'choice(4,8)',trainer.activation_checkpointing:'choice(true,false)'}",
        multirun=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    best = (sweep_dir / "optimization_results.yaml").read_text()
    tokens_per_s = [rundir.read_summary(sweep_dir / j).get("throughput/tokens_per_s", 0) for j in "01"]
    assert f"best_value: {max(tokens_per_s)}" in best


def test_a_trial_that_did_not_complete_never_beats_a_completed_one(cli):
    """optimized_metric=reward with a reward of -1: the trial refused as invalid (3 generations do not divide a batch
    of 4) scores -inf, not 0, so Optuna's best is the completed trial (it used to be the invalid one, best_value 0)."""
    result, sweep_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=1",
        "+sweep=optuna",
        "hydra/sweeper/sampler=grid",
        "optimized_metric=reward",
        "hydra.sweeper.n_trials=2",
        "+data.rewards.neg._target_=tests.user_code.minus_one",
        # every swept key given (the preset's own would widen the grid past the 2 trials)
        "hydra.sweeper.params={trainer.per_device_train_batch_size:'choice(4)',trainer.num_generations:'choice(4,3)',"
        "trainer.activation_checkpointing:'choice(false)'}",
        multirun=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert best["best_params"]["trainer.num_generations"] == 4 and best["best_value"] < 0, best


def test_sweep_runs_share_a_wandb_group_with_swept_values_as_keys(two_job_sweep):
    result, sweep_dir = two_job_sweep
    assert result.returncode == 0
    runs = [wandb_file.read_run(wandb_file.find_run_file(sweep_dir / j)) for j in "01"]
    assert runs[0].group == runs[1].group == f"default/{sweep_dir.name}"
    assert [r.config["env"] for r in runs] == ["none", "number_game"]  # a group choice, as W&B shows it
