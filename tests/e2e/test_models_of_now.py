"""The models of now train for real: tiny random-init models of each family (conf/model/tiny-moe, tiny-sliding,
tiny-hybrid) run GRPO steps through TRL, fully fine-tuned, with LoRA, and with LoRA on the fused experts of the
mixture of experts (PEFT's target_parameters); each run's model is the family's own class, and its plan says what
kind of model it is."""

import json

import pytest

from grpo_exp.core import rundir

pytestmark = pytest.mark.e2e
STEPS = ("topology.cpu_procs=1", "trainer.max_steps=2", "logger=none")  # step 2: the optimizer's states exist


def completed(result, run_dir) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2
    return summary


def test_a_mixture_of_experts_trains_with_lora_on_its_experts(cli):
    """LoRA on attention and on the experts' fused gate_up and down parameters (the option's lora_dropout gives way
    to 0: PEFT's ParamWrapper takes none); the adapters planned are the adapters trained."""
    experts = "peft.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]"
    result, run_dir = cli(*STEPS, "model=tiny-moe", "peft=lora", "peft.target_modules=[q_proj,v_proj]", experts)
    summary = completed(result, run_dir)
    assert summary["runtime"]["wrapper"] == "PeftModelForCausalLM"  # one process: the model itself, adapted
    frozen = rundir.load_config(run_dir / rundir.CONFIG)
    assert frozen.peft.lora_dropout == 0
    plan = json.loads((run_dir / rundir.PLAN).read_text())
    # r=16: q (64 -> 64) and v (64 -> 32) in 2 layers; 8 experts' gate_up (64 -> 64) and down (32 -> 64) in each
    planned = 16 * ((64 + 64) + (64 + 32)) * 2 + 16 * 8 * ((64 + 64) + (32 + 64)) * 2
    assert summary["runtime"]["trainable_parameters"] == planned
    assert "(8 experts, 2 active)" in result.stdout.splitlines()[0] and plan["train"]["peak_gib"] > 0


def test_a_user_given_dropout_with_lora_on_experts_is_refused_before_launch(cli):
    result, run_dir = cli(*STEPS, "model=tiny-moe", "peft=lora", "peft.lora_dropout=0.1",
                          "peft.target_parameters=[mlp.experts.gate_up_proj]")  # fmt: skip
    assert result.returncode == 2 and "peft.lora_dropout" in result.stderr and "Traceback" not in result.stderr
    assert not run_dir.exists()


def test_a_hybrid_linear_attention_model_trains_in_full(cli):
    result, run_dir = cli(*STEPS, "model=tiny-hybrid")
    assert completed(result, run_dir)["runtime"]["wrapper"] == "Qwen3NextForCausalLM"


def test_a_sliding_window_model_trains_with_lora(cli):
    result, run_dir = cli(
        *STEPS, "model=tiny-sliding", "peft=lora", "peft.target_modules=[q_proj,k_proj,v_proj,o_proj]"
    )
    assert completed(result, run_dir)["runtime"]["wrapper"] == "PeftModelForCausalLM"
    assert rundir.load_config(run_dir / rundir.CONFIG).model.model_type == "gemma3_text"
