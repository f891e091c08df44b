"""Memory telemetry through real 2-rank GRPO runs: per-phase host peaks over ranks in metrics.jsonl,
summary.json and the offline W&B run; a forced OOM becomes a recorded result."""

import psutil
import pytest

from grpo_exp.results import outcome, rundir, wandb_file

pytestmark = pytest.mark.e2e
STATS = ("", "_mean", "_min", "_argmax_rank")


def test_two_rank_run_logs_per_phase_peaks_everywhere(cli):
    # beta > 0 adds the reference-model scoring phase
    result, run_dir = cli("trainer.max_steps=2", "trainer.beta=0.04")
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
    assert [row["train/memory/train/host_rss_max_gib"] for row in logged] == [m["memory/train/host_rss_max_gib"] for m in metrics]
    assert "model:tiny" in wandb_run.tags and wandb_run.group == "default"
    assert wandb_run.config["trainer"]["beta"] == 0.04 and "trainer.beta=0.04" in wandb_run.config["overrides"]


def test_telemetry_off_logs_no_memory(cli):
    result, run_dir = cli("logger=none", "topology.cpu_procs=1", "trainer.max_steps=1", "memory.telemetry=false")
    assert result.returncode == 0
    assert not [k for m in rundir.read_metrics(run_dir) for k in m if k.startswith("memory/")]


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
