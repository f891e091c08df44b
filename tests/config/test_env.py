"""The env group: shipped options compose and pass; everything wrong with tools and environments is found
in the driver, each with its key, why and a fix."""

import pytest

from grpo_exp.config import env
from tests.helpers import compose_cfg, problem_keys, problems, report


@pytest.mark.parametrize("option", ["none", "calculator", "number_game"])
def test_shipped_options_pass_every_check(option):
    text, cfg = report(f"env={option}", "action=plan")
    assert text == ""
    assert env.active(cfg) == (option != "none")


def test_what_the_env_group_names():
    cfg = compose_cfg("env=number_game", "env.tools=[grpo_exp.training.environments.calculator]")
    assert env.tool_names(cfg) == ["calculator", "guess"]
    assert env.owns_reward(cfg) and env.label(cfg) == "number_game"
    own = compose_cfg("env.tools=[grpo_exp.training.environments.calculator]")
    assert env.label(own) == "custom" and not env.owns_reward(own)


def test_an_environment_with_get_reward_is_a_reward_source():
    """data.rewards may be emptied when the environment scores the episode (TRL adds its get_reward)."""
    no_rewards = ["data.rewards.correctness=null", "data.rewards.think_answer_format=null"]
    no_rewards += ["data.rewards.answer_closeness=null"]
    assert "data.rewards" not in problem_keys(problems("env=number_game", *no_rewards))
    assert "data.rewards" in problem_keys(problems("env=calculator", *no_rewards))


@pytest.mark.parametrize(
    "overrides, key, why",
    [
        (["env.tools=[no_such_pkg.tool]"], "env.tools[0]", "not an importable function"),
        (["env.tools=[tests.agentic_tools.undocumented]"], "env.tools[0]", "cannot describe it to the model"),
        (["env.factory={_target_: no_such_pkg.NoEnv}"], "env.factory._target_", "not an importable"),
        (["env.factory={_target_: tests.agentic_tools.NoReset}"], "env.factory", "has no reset()"),
        (["env.factory={_target_: tests.agentic_tools.Undescribed}"], "env.factory (Undescribed.poke)", "describe"),
        (["env=number_game", "+env.factory.size=3"], "env.factory", "unexpected keyword argument 'size'"),
        (["env.factory=tests.agentic_tools.NoReset"], "env.factory", "a factory is {_target_"),
        (
            ["env=number_game", "+env.factories.game._target_=grpo_exp.training.environments.NumberGame"],
            "env.factory",
            "both set",
        ),
        (
            ["env=calculator", "data=hf", "data.path=x.jsonl", "data.conversational=false"],
            "data.conversational",
            "chat",
        ),
    ],
)
def test_bad_tools_and_environments_are_refused_in_the_driver(overrides, key, why):
    found = [p for p in problems(*overrides) if p.key == key]
    assert found and why in found[0].why, problems(*overrides)
    assert found[0].fix


def test_a_function_factory_passes_unread():
    """A `_target_` that is a function returning an environment: what it returns is known only at run time."""
    assert problems("env.factory={_target_: grpo_exp.training.environments.calculator}") == []


def test_an_agentic_vllm_run_whose_context_cannot_hold_an_episode_is_refused():
    found = problems("env=calculator", "vllm=colocate", "vllm.max_model_length=100", "data.max_prompt_length=64")
    (problem,) = [p for p in found if p.key == "vllm.max_model_length"]
    assert "64 + trainer.max_completion_length 64 = 128 tokens" in problem.why
    assert "vllm.max_model_length" not in problem_keys(problems("env=calculator", "vllm=colocate"))


@pytest.mark.parametrize("sharding", ["fsdp=full_shard", "deepspeed=zero3"])
def test_tools_with_weights_sharded_in_every_generation_round_are_refused(sharding):
    """TRL's tool loop runs as many rounds on a rank as its episodes call tools: sharded ranks fall out of step."""
    found = [p for p in problems("action=plan", "env=number_game", sharding) if p.key == "env"]
    assert found and "generation rounds" in found[0].why and "vllm=colocate" in found[0].fix
    assert not [p for p in problems("action=plan", "env=number_game", "deepspeed=zero2") if p.key == "env"]


@pytest.mark.parametrize(
    "source,cause",
    [
        ("import rapidfuzz_not_installed\n", "ModuleNotFoundError: No module named 'rapidfuzz_not_installed'"),
        ("def reward(:\n", "SyntaxError: "),
        ("x = 1\n", "module 'user_mod_{i}' has no attribute 'reward'"),
    ],
)
def test_user_code_that_does_not_import_is_refused_with_its_own_cause(tmp_path, monkeypatch, source, cause):
    """A reward, a tool and an environment whose module fails to import: each refusal quotes the exception."""
    i = abs(hash(source)) % 10**6  # a module name of its own per case (the import system caches failures too)
    (tmp_path / f"user_mod_{i}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    cause = cause.format(i=i)
    for overrides, key in (
        ((f"+data.rewards.mine._target_=user_mod_{i}.reward",), "data.rewards.mine._target_"),
        (("env=calculator", f"env.tools=[user_mod_{i}.reward]"), "env.tools[0]"),
        ((f"+env.factory._target_=user_mod_{i}.reward",), "env.factory._target_"),
    ):
        found = [p for p in problems("action=plan", *overrides) if p.key == key]
        assert found and cause in found[0].why, (key, found)
