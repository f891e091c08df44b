"""tests/helpers.compose_cfg composes in Hydra's two steps with the first cached: the config, and the error for a
bad value, must be what one Hydra compose gives, or every test that reads a config would test something else."""

import pytest
from hydra import compose
from omegaconf import OmegaConf

from grpo_exp.config import errors
from tests.helpers import FIXTURES, compose_cfg

SAME = [
    ["trainer.beta=0.1", "model=qwen7b", "topology=2x8"],
    ["deepspeed=zero3", "deepspeed.zero_optimization.stage=2", "trainer.per_device_train_batch_size=8"],
    ["experiment=open_r1_demo", "trainer.learning_rate=1e-6", "model.dtype=float32"],
    ["+data.rewards.hog._target_=tests.memory_hog.memory_hog", "~data.rewards.correctness", "env=number_game"],
    ["data=jsonl", f"data.path={FIXTURES}/gsm8k_sample.jsonl", "++trainer.model_init_kwargs.revision=main"],
    ["vllm=server", "vllm.gpus=2", "topology=1x8", "hydra.run.dir=/tmp/x", "topology.master_port=29600"],
    ["trainer.model_init_kwargs={revision: ${oc.env:HOME}}", "logger=none", "fsdp=full_shard"],
]
BAD = [
    ["trainer.learning_rate=abc"],
    ["trainer.num_generations=[1,2]"],
    ["model=qwen7b", "env.factories.a._target_=m.EnvA"],
    ["trainer.beta=0.1,0.2"],
]


def _whole(overrides):
    return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("overrides", SAME, ids=[" ".join(o)[:60] for o in SAME])
def test_two_steps_compose_what_one_compose_does(overrides):
    assert OmegaConf.to_yaml(compose_cfg(*overrides)) == OmegaConf.to_yaml(_whole(overrides))


@pytest.mark.parametrize("overrides", BAD, ids=[" ".join(o) for o in BAD])
def test_a_bad_value_is_the_same_error(overrides):
    compose_cfg()  # Hydra initialised
    with pytest.raises(Exception) as two_steps:
        compose_cfg(*overrides)
    with pytest.raises(Exception) as one:
        _whole(overrides)
    assert type(two_steps.value) is type(one.value)
    assert errors.explain(two_steps.value) == errors.explain(one.value)
