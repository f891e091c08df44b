"""QLoRA trains and evaluates on held-out prompts, for real."""

import json

import pytest

from grpo_exp.core import rundir
from grpo_exp.results import wandb_file


@pytest.mark.e2e
def test_qlora_trains_and_evaluates_on_held_out_prompts(cli, tmp_path):
    """One real run for both: 4-bit base weights with LoRA, evaluated every step, W&B offline."""
    (tmp_path / "eval.jsonl").write_text(
        "".join(json.dumps({"prompt": f"What is {a} + 1?", "answer": str(a + 1)}) + "\n" for a in range(8))
    )
    result, run_dir = cli(
        "peft=qlora",
        "topology.cpu_procs=1",
        "trainer.max_steps=2",
        "logger.mode=offline",
        "trainer.eval_strategy=steps",
        "trainer.eval_steps=1",
        f"data.eval_path={tmp_path / 'eval.jsonl'}",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    runtime = summary["runtime"]
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert (
        runtime["weight_bits"] == 4
        and runtime["wrapper"].startswith("PeftModel")
        and runtime["trainable_parameters"] == 32768
    )
    evals = [m for m in rundir.read_metrics(run_dir) if any(k.startswith("eval_") for k in m)]
    assert [m["step"] for m in evals] == [1, 2] and all(isinstance(m["eval_reward"], float) for m in evals)
    history = wandb_file.read_run(wandb_file.find_run_file(run_dir)).history
    assert [row["eval/reward"] for row in history if "eval/reward" in row] == [m["eval_reward"] for m in evals]
    assert summary["plan/train/dequantized_weights_gib"] > 0  # the plan it ran under was QLoRA's
