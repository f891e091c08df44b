"""The whole config, for real: GRPOConfig fields beyond grpo_exp's own YAML reach the trainer the
worker builds (the session's one-process run, conftest.EXTRA_FIELDS); a user's own model directory
(model=auto) and own dataset files (data=hf, with their own column names) train; an extra column
reaches a reward function."""

import json

import pytest

from grpo_exp.core import rundir
from grpo_exp.results import wandb_file
from tests.helpers import EXTRA_FIELDS

pytestmark = pytest.mark.e2e
ONE_STEP = ("topology.cpu_procs=1", "trainer.max_steps=1")


def assert_completed(result, run_dir, steps=1) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == steps
    return summary


def test_any_grpo_config_field_reaches_the_workers_grpo_config(one_rank_run):
    result, run_dir = one_rank_run
    assert_completed(result, run_dir, steps=2)
    # transformers' WandbCallback logs the GRPOConfig the worker built (args.to_dict()) into the run's config
    built = wandb_file.read_run(wandb_file.find_run_file(run_dir)).config
    assert (
        built["save_total_limit"],
        built["epsilon_high"],
        built["min_p"],
        built["beta"],
        built["sync_ref_model"],
    ) == (2, 0.28, 0.05, 0.04, True)
    assert built["learning_rate"] == 1e-05 and built["optim"] == "adamw_torch_fused"  # grpo.yaml's delta; TRL's default


def test_sync_ref_model_without_beta_is_refused_before_launch(cli):
    result, run_dir = cli(*ONE_STEP, "logger=none", *[o for o in EXTRA_FIELDS if "beta" not in o])
    assert result.returncode == 2 and "trainer.sync_ref_model" in result.stderr and "Traceback" not in result.stderr
    assert not run_dir.exists()


def test_model_auto_trains_a_local_mistral(cli, saved_models):
    result, run_dir = cli(*ONE_STEP, "logger=none", "model=auto", f"model.name_or_path={saved_models['mistral']}")
    summary = assert_completed(result, run_dir)
    frozen = rundir.load_config(run_dir / rundir.CONFIG)
    assert frozen.model.model_type == "mistral" and frozen.model.num_parameters == summary["runtime"]["parameters"]
    assert summary["runtime"]["wrapper"] == "MistralForCausalLM"
    assert json.loads((run_dir / rundir.PLAN).read_text())["train"]["peak_gib"] > 0


def test_data_hf_trains_with_renamed_columns_and_rewards_get_every_column(cli, tmp_path):
    """A parquet file (test_units reads every format data=hf takes with the worker's own loader)."""
    from datasets import Dataset

    rows = [{"question": f"What is {a} + {a}?", "solution": str(2 * a), "level": a % 3} for a in range(32)]
    path = tmp_path / "d.parquet"
    Dataset.from_list(rows).to_parquet(path)
    seen = tmp_path / "seen.jsonl"
    result, run_dir = cli(
        *ONE_STEP,
        "logger=none",
        "data=hf",
        f"data.path={path}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "+data.rewards.probe._target_=tests.memory_hog.record_columns",
        f"+data.rewards.probe.out={seen}",
    )
    assert_completed(result, run_dir)
    calls = [json.loads(line) for line in seen.read_text().splitlines()]
    assert calls and all(call["level"] and set(call["level"]) <= {0, 1, 2} for call in calls)  # the extra column
    assert all("answer" in call["columns"] for call in calls)  # `solution`, renamed for grpo_exp's own rewards
    metrics = rundir.read_metrics(run_dir)
    assert "rewards/correctness/mean" in metrics[0] and "rewards/record_columns/mean" in metrics[0]


def test_plain_text_prompts_train_with_telemetry_off_and_the_full_console(cli, tmp_path):
    """Raw-text prompts (no chat template); the same run has memory telemetry off (no memory/* logged)
    and the full console (TRL's metric dicts on stdout, which the quiet default keeps in train.log)."""
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"text": f"{a} plus {a} is", "answer": str(2 * a)}) + "\n" for a in range(16))
    )
    result, run_dir = cli(
        *ONE_STEP,
        "logger=none",
        "data=hf",
        f"data.path={tmp_path / 'd.jsonl'}",
        "data.prompt_column=text",
        "data.conversational=false",
        "memory.telemetry=false",
        "logger.console=full",
    )
    assert_completed(result, run_dir)
    assert "columns ['prompt', 'answer']" in (run_dir / rundir.LOG).read_text()
    assert not [k for m in rundir.read_metrics(run_dir) for k in m if k.startswith("memory/")]
    assert "'loss'" in result.stdout
