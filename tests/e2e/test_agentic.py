"""Agentic GRPO for real, on the 2 CPU processes of make demo: a user's own two tools (the session's two_rank_run)
and the number game's environments (job 1 of two_job_sweep) train from tool calls the model writes itself; the
tools phase and TRL's tools/* metrics reach metrics.jsonl, summary.json, W&B and the run report; a tool that
raises is a failed call, one that hangs a stalled run."""

import json

import psutil
import pytest

from grpo_exp.core import metrics, rundir
from grpo_exp.planning import plan_file
from grpo_exp.results import compare, report, wandb_file

pytestmark = pytest.mark.e2e


def assert_agentic(result, run_dir, steps: int) -> dict:
    """Completed on 2 ranks with tool calls from the model at some step, the tools phase measured in every
    record and in the summary, the tools/* metrics in W&B's offline file and the run report."""
    assert result.returncode == 0, result.stdout[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["world_size"] == 2
    records = rundir.read_metrics(run_dir)
    assert len(records) == steps
    assert max(r[metrics.TOOL_CALLS] for r in records) > 0  # calls the model wrote, parsed by TRL
    assert all(0 <= r[metrics.TOOL_FAILURES] <= 1 and 0 <= r[metrics.TOOL_DROPPED] <= 1 for r in records)
    assert all(r["memory/tools/host_rss_max_gib"] > 0.05 for r in records)
    assert summary["memory/peak_phase/tools/host_rss_max_gib"] > 0.05 and summary["time/tools_s"] > 0
    logged = wandb_file.read_run(wandb_file.find_run_file(run_dir))
    history = [row[f"train/{metrics.TOOL_CALLS}"] for row in logged.history if f"train/{metrics.TOOL_CALLS}" in row]
    assert history == [r[metrics.TOOL_CALLS] for r in records]
    lines = report.headline(summary)
    assert any(line.startswith("time:") and "| tools " in line for line in lines)
    assert any(line.startswith("tools: ") and "calls per episode" in line for line in lines)
    return summary


def test_a_users_own_tools_train_on_two_ranks_and_the_tiny_model_calls_them(two_rank_run):
    """TRL's docs' multiply and async_add (a coroutine, run on TRL's event loop): the warm start built from their
    schemas makes the tiny model call them, and most calls are ones the tools accept (measured: 0.25-0.5 calls per
    episode, none failed, no result dropped)."""
    result, run_dir = two_rank_run
    assert_agentic(result, run_dir, steps=2)
    episode = plan_file.read(run_dir)["env"]
    assert episode["name"] == "custom" and episode["tools"] == ["multiply", "async_add"]
    assert episode["instances_per_rank"] == 4  # per_device_train_batch_size 4 x 1 step per generation
    records = rundir.read_metrics(run_dir)
    # 16 episodes (8 a step): a floor of one call holds on any CPU's numerics; 0.2 (3 calls) would not always
    assert sum(r[metrics.TOOL_CALLS] for r in records) / len(records) > 0.05
    assert sum(r[metrics.TOOL_FAILURES] for r in records) / len(records) < 0.5


def test_the_number_game_trains_on_two_ranks_and_scores_its_episodes(two_job_sweep):
    result, sweep_dir = two_job_sweep
    assert_agentic(result, sweep_dir / "1", steps=2)
    records = rundir.read_metrics(sweep_dir / "1")
    assert all("rewards/NumberGame/mean" in r for r in records)  # get_reward: a reward source beside data.rewards
    assert metrics.TOOL_CALLS not in rundir.read_metrics(sweep_dir / "0")[0]  # the plain job: no tools


def test_compare_shows_tool_calls_beside_memory_across_an_env_sweep(two_job_sweep):
    _, sweep_dir = two_job_sweep
    rows = compare.rows(compare.load_local(sweep_dir))
    assert [row["env"] for row in rows] == ["none", "number_game"]
    assert rows[0]["tool calls"] is None and rows[1]["tool calls"] > 0
    assert rows[1]["tools share"] > 0 and all(row["peak GiB"] > 0 for row in rows)


def test_a_tool_that_raises_is_a_failed_call_not_a_dead_run(cli):
    result, run_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=2",
        "env.factory={_target_: tests.agentic_tools.FailingCalculator}",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    records = rundir.read_metrics(run_dir)
    assert rundir.read_summary(run_dir)["status"] == "completed" and len(records) == 2
    called = [r for r in records if r[metrics.TOOL_CALLS] > 0]
    assert called and all(r[metrics.TOOL_FAILURES] == 1.0 for r in called)


def test_a_tool_that_hangs_is_a_stalled_run_with_its_stack(cli):
    result, run_dir = cli(
        "logger=none",
        "watchdog.stall_s=8",
        "trainer.max_steps=3",
        "env.factory={_target_: tests.agentic_tools.HangingCalculator}",  # hangs on rank 1
    )
    assert result.returncode == 5
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "stalled" and "stacks/rank1.txt" in summary["error"]
    stack = (run_dir / "stacks" / "rank1.txt").read_text()
    assert "in calculator" in stack and "_tool_call_loop" in stack
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]


def _prompts_seen(work) -> set[str]:
    from tests.user_code import PROMPTS

    return {json.loads(line) for line in (work / PROMPTS).read_text().splitlines()}


def test_data_none_the_environment_owns_the_data(cli, tmp_path):
    """TRL's environment_factory without a train_dataset: reset()'s return is the whole prompt, max_steps the length,
    get_reward the environment's reward beside a user reward that needs no dataset column."""
    work = tmp_path / "work"
    work.mkdir()
    result, run_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=2",
        "data=none",
        "env.factory={_target_: tests.user_code.Counter}",
        "+data.rewards.seen._target_=tests.user_code.record_prompts",
        f"env.working_dir={work}",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    records = rundir.read_metrics(run_dir)
    assert len(records) == 2 and all("rewards/Counter/mean" in r for r in records)
    seen = _prompts_seen(work)
    assert seen and all(p.startswith("The counter is at ") for p in seen), seen  # reset()'s text, nothing before it


def test_multi_environment_rows_carry_only_their_environment(cli, tmp_path):
    """TRL's multi-environment data as its docs write it: the dict form of env.factories, rows naming only their
    `environment` (and that environment's columns), each reset() giving the prompt; the environments' get_reward
    are the only rewards once data.rewards is given whole."""
    work = tmp_path / "work"
    work.mkdir()
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"environment": "echo" if i % 2 else "counter", "start": i % 5, "word": f"w{i % 7}"}) + "\n"
            for i in range(64)
        )
    )
    result, run_dir = cli(
        "logger=none",
        "topology.cpu_procs=1",
        "trainer.max_steps=2",
        "data=hf",
        f"data.path={rows}",
        "env.factories={counter: {_target_: tests.user_code.Counter}, echo: {_target_: tests.user_code.Echo}}",
        "data.rewards={seen: {_target_: tests.user_code.record_prompts}}",
        "trainer.shuffle_dataset=false",  # one prompt a step, in row order: a counter episode, then an echo one
        f"env.working_dir={work}",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    config = rundir.load_config(run_dir / rundir.CONFIG)
    assert list(config.data.rewards) == ["seen"] and list(config.env.factories) == ["counter", "echo"]
    records = rundir.read_metrics(run_dir)
    assert all("rewards/Counter/mean" in r and "rewards/Echo/mean" in r for r in records)
    seen = _prompts_seen(work)
    assert any(p.startswith("The counter is at ") for p in seen) and any(p.startswith("Make the echo") for p in seen)
    assert all(p.startswith(("The counter is at ", "Make the echo")) for p in seen), seen
