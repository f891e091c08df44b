"""Dashboards: the W&B workspace spec names metrics real runs log, the run report is built from
summary.json alone, the console is quiet by default, and planning sweeps end with a table and a
heatmap without a GPU."""

import json

import pytest

from grpo_exp.core import rundir
from grpo_exp.results import compare, dashboard, report, wandb_file
from tests.helpers import planned, run_driver

# Metrics a CPU run cannot produce: the GPU allocator and NVML stats, the vLLM server, weight sync.
NOT_ON_CPU = (*dashboard.GPU_STATS, "/vllm/", "weight_sync")


@pytest.fixture(scope="module")
def cpu_run(two_rank_run):
    """The session's real 2-rank run: W&B offline, a reference model (so the score phase runs)."""
    result, run_dir = two_rank_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, run_dir


def test_dry_run_spec_is_wandbs_own_model(tmp_path):
    import wandb_workspaces.workspaces.internal as internal

    out = tmp_path / "spec.json"
    assert dashboard.main(["--project", "grpo_exp", "--dry-run", "--report", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [w["displayName"] for w in data["workspaces"]] == ["grpo_exp memory", "grpo_exp OOMs"]
    for view in data["workspaces"]:
        internal.View.model_validate(view)  # W&B's own pydantic model of a saved view accepts it
    names = dashboard.metric_names(data)
    assert any(n.startswith("train/memory/") for n in names) and any(n.startswith("plan/") for n in names)
    assert "memory/peak/train/host_rss_max_gib" in names and "trainer.num_generations" in names


@pytest.mark.e2e
def test_every_panel_names_a_metric_real_runs_log(cpu_run, tmp_path):
    _, run_dir = cpu_run
    logged = wandb_file.read_run(wandb_file.find_run_file(run_dir))

    def flat(node, prefix=""):  # W&B shows nested config as dotted keys (trainer.num_generations)
        return {
            k2
            for k, v in node.items()
            for k2 in (flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"})
        }

    keys = {k for row in logged.history for k in row} | set(logged.summary) | flat(logged.config)
    spec = dashboard.spec("grpo_exp", "entity", None, with_report=False)
    missing = [n for n in dashboard.metric_names(spec) if n not in keys and not any(part in n for part in NOT_ON_CPU)]
    assert missing == []
    # the OOM view's runs table reads the summary's oom record
    oom_view = json.dumps(spec["workspaces"][1])
    assert "oom.phase" in oom_view and "oom.rank" in oom_view


@pytest.mark.e2e
def test_quiet_console_and_the_run_report(cpu_run):
    result, run_dir = cpu_run
    console = result.stdout + result.stderr
    assert "Warning" not in console and "WARNING" not in console
    assert [line for line in console.splitlines() if len(line) > 200 and "torch.distributed.run" not in line] == []
    assert console.count("] step ") == 2 and "run report" in console and "tokens/s" in console
    log = (run_dir / rundir.LOG).read_text()
    assert "FutureWarning" in log or "wandb" in log  # everything else went to train.log
    assert "'loss'" in log  # TRL's metric dicts: train.log only
    summary = rundir.read_summary(run_dir)
    rows = {(role, phase): (measured, planned) for role, phase, measured, planned, _ in report.memory_rows(summary)}
    assert rows[("train", "train")] == (
        f"{summary['memory/peak_phase/train/host_rss_max_gib']:.2f}",
        f"{summary['plan/train/phases/train_gib']:.2f}",
    )
    assert "reward" in report.headline(summary)[0] and "->" in report.headline(summary)[0]


def test_report_of_an_oom():
    summary = {
        "status": "oom",
        "exit_code": 4,
        "oom": {"phase": "reward", "rank": 1, "kind": "host", "requested_bytes": 8 * 2**30},
    }
    assert "OOM in phase reward on rank 1 (host): 8.00 GiB requested" in report.headline(summary)


# logger.console=full (everything on the console): test_e2e_config.test_plain_text_prompts_train...


@pytest.mark.slow  # a planning multirun through the real CLI
def test_planning_sweep_ends_with_a_table_and_a_heatmap(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_driver(
        tmp_path,
        tmp_path,
        "-m",
        "action=plan",
        "model=qwen7b",
        "topology=1x8",
        "trainer.per_device_train_batch_size=1,4,16",
        "trainer.num_generations=4,8",
        "trainer.max_completion_length=1024",
        "trainer.activation_checkpointing=false",  # every layer's activations: the batch decides what fits
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    runs = compare.load_local(sweep)
    assert len(runs) == 6 and all(r.status == "planned" for r in runs)
    # the table links each trial to its dir
    assert [r.path for r in runs] == [(sweep / str(i)).resolve() for i in range(6)]
    verdicts = [row["verdict"] for row in compare.rows(runs)]
    assert verdicts == ["fits", "fits", "OOM", "OOM", "OOM", "OOM"]
    assert all(row["top fix"] for row in compare.rows(runs) if row["verdict"] == "OOM")
    assert "verdict" in result.stdout  # the sweep's own table
    png = compare.heatmap(runs, tmp_path / "h.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # a planning multirun through the real CLI
def test_planning_frontier_launches_nothing(tmp_path):
    sweep = tmp_path / "frontier"
    result = run_driver(
        tmp_path,
        tmp_path,
        "+sweep=frontier",
        "action=plan",
        "model=qwen7b",
        "topology=1x8",
        "trainer.max_completion_length=4096",  # TRL's shape otherwise: the batch decides what fits below 32
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    frontier = json.loads((sweep / "frontier.json").read_text())
    shape = ("model=qwen7b", "topology=1x8", "trainer.max_completion_length=4096")

    def fits(batch: int, generations: int) -> bool:
        both = (f"trainer.per_device_train_batch_size={batch}", f"trainer.num_generations={generations}")
        return planned(*shape, *both).memory.fits

    # the largest candidate the planner says fits, per num_generations (8 and 8 before NCCL's buffers were planned)
    assert frontier["frontier"] == {str(g): max(b for b in (1, 2, 4, 8, 16, 32) if fits(b, g)) for g in (4, 8)}
    assert max(frontier["frontier"].values()) > 1  # the plan separates the candidates
    assert not list(sweep.glob("*/train.log"))  # nothing trained
