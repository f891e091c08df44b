"""Stage 1 of the checks (config/config_checks.py): values out of range or choice, and what TRL, transformers or
torch would refuse in every worker, refused by the driver first."""

import pytest

from grpo_exp.config import errors
from tests.helpers import compose_cfg, every, fast_lane, problem_keys, problems


def test_a_value_left_missing_is_named_with_its_full_key_as_omegaconf_names_it():
    """check_required walks the plain container instead of OmegaConf.missing_keys (several times faster on the
    config's ~500 keys): the same keys, in the config's order, a list's element by its index."""
    from omegaconf import OmegaConf

    from grpo_exp.config import config_checks

    cfg = compose_cfg("data.name=???", "trainer.reward_weights=[1.0,???]")
    found = problem_keys(config_checks.check_required(cfg))
    assert found == ["data.name", "trainer.reward_weights[1]"]
    assert set(found) == OmegaConf.missing_keys(cfg)
    assert problem_keys(problems("data.name=???"))[:1] == ["data.name"]  # and the driver stops there


# --- the driver and TRL in step ----------------------------------------------------------------
# Each invalid trainer value, and how the library stack refuses it when the driver does not:
# GRPOConfig's own __post_init__, or the object TRL/transformers build from it during training.
def _grpo_config(field, value):
    from trl import GRPOConfig

    GRPOConfig(output_dir="/tmp/grpo_exp_test", use_cpu=True, report_to="none", **{field: value})


def _adamw(**kwargs):
    import torch

    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], **kwargs)


def _dataloader(**kwargs):
    import torch

    torch.utils.data.DataLoader([1], **kwargs)


def _warper(name, value):
    import transformers.generation.logits_process as lp

    getattr(lp, name)(value)


def _generation_config(**kwargs):
    from transformers import GenerationConfig

    GenerationConfig(**kwargs).validate(strict=True)


INVALID_TRAINER = {
    # key: (value, how the stack refuses it)
    "num_generations": (1, lambda v: _grpo_config("num_generations", v)),
    "logging_steps": (0, lambda v: _grpo_config("logging_steps", v)),
    "warmup_steps": (-1, lambda v: _grpo_config("warmup_steps", v)),
    "lr_scheduler_type": ("nope", lambda v: _grpo_config("lr_scheduler_type", v)),
    "optim": ("nope", lambda v: _grpo_config("optim", v)),
    "save_strategy": ("sometimes", lambda v: _grpo_config("save_strategy", v)),
    "auto_find_batch_size": (True, lambda v: _grpo_config("auto_find_batch_size", v)),
    "per_device_train_batch_size": (
        0,
        lambda v: _dataloader(batch_size=v),
    ),  # Trainer's dataloader
    "learning_rate": (-1.0, lambda v: _adamw(lr=v)),  # Trainer's AdamW
    "adam_beta1": (1.5, lambda v: _adamw(betas=(v, 0.999))),
    "weight_decay": (-1.0, lambda v: _adamw(weight_decay=v)),
    "adam_epsilon": (-1.0, lambda v: _adamw(eps=v)),
    "temperature": (-0.5, lambda v: _warper("TemperatureLogitsWarper", v)),  # generate()'s sampling
    "top_p": (1.5, lambda v: _warper("TopPLogitsWarper", v)),
    "min_p": (2.0, lambda v: _warper("MinPLogitsWarper", v)),
    "top_k": (-1, lambda v: _warper("TopKLogitsWarper", v)),
    "repetition_penalty": (0.0, lambda v: _warper("RepetitionPenaltyLogitsProcessor", v)),
    "max_completion_length": (0, lambda v: _generation_config(max_new_tokens=v)),
}


# Values GRPOConfig accepts and training survives, but that make the run meaningless; the driver is
# the only check (the reason is the test's documentation).
MEANINGLESS_TRAINER = {
    "gradient_accumulation_steps": (0, "Trainer divides the dataloader length by it"),
    "beta": (-0.04, "a negative KL coefficient rewards drifting away from the reference model"),
    "epsilon": (-0.1, "a negative clip range clips every ratio"),
    "num_iterations": (0, "no optimisation pass over a generation batch"),
    "max_steps": (0, "trains nothing (-1 means: use num_train_epochs)"),
    "save_total_limit": (0, "deletes every checkpoint"),
    "num_train_epochs": (0.0, "trains nothing"),
    "max_grad_norm": (-1.0, "a negative clipping norm"),
}


@pytest.mark.slow  # builds GRPOConfig: importing trl is ~4 s of make test-fast's budget on each worker
@pytest.mark.parametrize("field", INVALID_TRAINER)
def test_invalid_trainer_value_is_refused_by_trl_and_by_the_driver(field):
    value, refuse = INVALID_TRAINER[field]
    with pytest.raises((ValueError, TypeError)):
        refuse(value)
    assert f"trainer.{field}" in problem_keys(problems(f"trainer.{field}={value}"))


@pytest.mark.parametrize("field", MEANINGLESS_TRAINER)
def test_meaningless_trainer_value_is_refused_by_the_driver(field):
    value, _reason = MEANINGLESS_TRAINER[field]
    assert f"trainer.{field}" in problem_keys(problems(f"trainer.{field}={value}"))


ISSUE_EXAMPLES = {  # overrides -> the key the report names
    "trainer.per_device_train_batch_size=0": "trainer.per_device_train_batch_size",
    "trainer.gradient_accumulation_steps=0": "trainer.gradient_accumulation_steps",
    "trainer.max_completion_length=0": "trainer.max_completion_length",
    "trainer.learning_rate=-1": "trainer.learning_rate",
    "trainer.temperature=-0.5": "trainer.temperature",
    "data.max_prompt_length=-5": "data.max_prompt_length",
    "model=qwen7b topology=1x8 vllm=colocate vllm.gpu_memory_utilization=1.5": "vllm.gpu_memory_utilization",
    "topology=1x8 topology.gpu_memory_gib=-1": "topology.gpu_memory_gib",
    "peft=lora peft.r=0": "peft.r",
    "memory.limit_gib=-1": "memory.limit_gib",
    "memory.limit_gib=1": "memory.limit_gib",  # below what a CPU worker needs to start
    "watchdog.stall_s=0": "watchdog.stall_s",
    "topology.master_port=99999": "topology.master_port",
    "trainer.sync_ref_model=true": "trainer.sync_ref_model",  # TRL: nothing to sync with beta 0
    "trainer.loss_type=nope": "trainer.loss_type",
    "trainer.scale_rewards=nope": "trainer.scale_rewards",
    "trainer.lr_scheduler_kwargs=5": "trainer.lr_scheduler_kwargs",
    "trainer.eval_strategy=steps": "trainer.eval_strategy",
    "peft=lora peft.target_modules=[q_proj,lm_head]": "peft.target_modules",
    "vllm=colocate vllm.importance_sampling_clip_min=5": "vllm.importance_sampling_clip_min",
}


@pytest.mark.parametrize("overrides", fast_lane(list(ISSUE_EXAMPLES), every(5, list(ISSUE_EXAMPLES))))
def test_invalid_example_is_named(overrides):
    assert ISSUE_EXAMPLES[overrides] in problem_keys(problems(*overrides.split()))


def test_a_tensor_parallel_size_that_does_not_divide_the_heads_is_refused_before_launch():
    """vLLM would refuse it as the engine starts; qwen7b has 28 attention heads."""
    serving = ("model=qwen7b", "topology=2x8", "vllm=server", "vllm.nodes=1", "action=plan")
    (problem,) = problems(*serving, "vllm.tensor_parallel_size=8")
    assert problem.key == "vllm.tensor_parallel_size" and "does not divide qwen7b's 28 attention heads" in problem.why
    assert problem.fix == "use one of [1, 2, 4, 7, 14]"
    assert problems(*serving, "vllm.tensor_parallel_size=4") == []
    assert problems("model=qwen7b", "topology=1x8", "vllm=colocate", "vllm.tensor_parallel_size=8", "action=plan") != []
    assert problems("model=qwen7b", "topology=1x8", "vllm.tensor_parallel_size=8", "action=plan") == []  # no engine


def test_valid_extras_pass():
    assert (
        problems(
            "trainer.beta=0.04",
            "trainer.sync_ref_model=true",
            "trainer.epsilon_high=0.28",
            "trainer.min_p=0.05",
            "trainer.save_total_limit=2",
        )
        == []
    )


@pytest.mark.parametrize(
    "override,expected",
    [
        ("trainer.epsilon_hi=0.3", "did you mean trainer.epsilon_high"),
        ("trainer.save_total_limt=2", "did you mean trainer.save_total_limit"),
        ("trainer.output_dir=/x", "use the run dir (hydra.run.dir)"),
        ("trainer.seed=1", "use seed (top level)"),
        ("trainer.hub_token=abc", "HF_TOKEN environment variable"),
        ("trainer.vllm_gpu_memory_utilization=0.5", "use vllm.gpu_memory_utilization"),
        ("vllm.server_base_url=http://x", "vllm.server_host and vllm.server_port"),
        ("topology.nnode=2", "did you mean topology.nnodes"),
    ],
)
def test_unknown_key_says_what_to_use(override, expected):
    from hydra.errors import HydraException

    with pytest.raises(HydraException) as caught:
        compose_cfg(override)
    assert expected in errors.explain(caught.value)


# The str fields whose values TRL checks only at run time, listed by hand in config/config_checks.py CHOICES: every
# option accepted is one the installed trl documents for the field (quoted in its help), and where the help
# lists its options in one sentence ("Supported values are 'a', 'b' and 'c'."), each of them is accepted.
TRL_WORDS = {
    "trainer.loss_type": "loss_type",
    "trainer.scale_rewards": "scale_rewards",
    "trainer.importance_sampling_level": "importance_sampling_level",
    "trainer.multi_objective_aggregation": "multi_objective_aggregation",
    "vllm.importance_sampling_mode": "vllm_importance_sampling_mode",
    "vllm.model_impl": "vllm_model_impl",
}


@pytest.mark.parametrize("key", list(TRL_WORDS))
def test_the_choices_listed_by_hand_are_the_options_trl_documents(key):
    import dataclasses
    import re

    from trl import GRPOConfig

    from grpo_exp.config.values import CHOICES

    text = " ".join(
        next(f for f in dataclasses.fields(GRPOConfig) if f.name == TRL_WORDS[key]).metadata["help"].split()
    )
    documented = set(re.findall(r"['\"`]+([a-z][a-z0-9_]*)['\"`]+", text))
    assert set(CHOICES[key]) <= documented, f"{key}: {set(CHOICES[key]) - documented} are not options of this trl"
    word = r"['`][a-z0-9_]+['`]"
    listed = re.search(
        rf"(?:Supported (?:values|options) are:?|Must be one of) ((?:{word}(?:, |,? and |,? or ))+{word})\.", text
    )
    if listed:
        options = set(re.findall(r"[a-z][a-z0-9_]*", listed.group(1))) - {"and", "or"}
        assert options <= set(CHOICES[key]), f"{key}: trl lists {options - set(CHOICES[key])}, which we refuse"
