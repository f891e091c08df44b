"""The env group: shipped options compose and pass; everything wrong with tools and environments is found
in the driver, each with its key, why and a fix."""

import pytest

from grpo_exp.config import env
from tests.helpers import compose_cfg, planned, problem_keys, problems, report


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


# --- as TRL users write it: whole mappings, data=none, the environment around the code --------------------------

COUNTER = "env.factory={_target_: tests.user_code.Counter}"
BOTH = "env.factories={counter: {_target_: tests.user_code.Counter}, echo: {_target_: tests.user_code.Echo}}"


def test_a_mapping_given_whole_replaces_the_options_one():
    """`key={...}` on an open mapping is what the user wrote (Hydra would merge it into the option's, and refuse a
    new name in it); `+key.name=` still adds one entry. Only plain assignments of a mapping qualify."""
    from grpo_exp.config import overrides

    given = [BOTH, "data.rewards={}", "+data.rewards.x._target_=m.f", "trainer.beta=0.1", "env.factory={_target_: m.E}"]
    assert overrides.whole_mappings(given) == {
        BOTH: (
            "env.factories",
            {"counter": {"_target_": "tests.user_code.Counter"}, "echo": {"_target_": "tests.user_code.Echo"}},
        ),
        "data.rewards={}": ("data.rewards", {}),
    }
    assert list(compose_cfg(BOTH).env.factories) == ["counter", "echo"]
    assert dict(compose_cfg("env=number_game", "data.rewards={}").data.rewards) == {}
    mine = compose_cfg("data.rewards={mine: {_target_: tests.user_code.record_prompts}}").data.rewards
    assert list(mine) == ["mine"]  # toy_math's three are gone


def test_no_reward_source_at_all_is_refused_with_the_overrides_that_give_one():
    (found,) = [p for p in problems("data.rewards={}") if p.key == "data.rewards"]
    assert "'data.rewards={correctness: {_target_:" in found.fix and "+data.rewards.correctness._target_" in found.fix
    assert "data.rewards" not in problem_keys(problems("env=number_game", "data.rewards={}"))  # get_reward scores
    (weights,) = [p for p in problems("trainer.reward_weights=[1.0,1.0]") if p.key == "trainer.reward_weights"]
    assert "trainer.reward_weights=[1.0, 1.0, 1.0]" in weights.fix


def test_data_none_the_environment_owns_the_data():
    text, cfg = report("data=none", COUNTER, "trainer.max_steps=4", "action=plan")
    assert text == "" and cfg.data.loader._target_ == "grpo_exp.data.none.load"
    notes = planned("data=none", COUNTER, "trainer.max_steps=4").memory.notes
    assert any("data=none" in n and "data.max_prompt_length=128" in n for n in notes)


@pytest.mark.parametrize(
    "overrides, key, why",
    [
        (["data=none", COUNTER, "trainer.max_steps=-1"], "trainer.max_steps", "no dataset sets the run's length"),
        (["data=none", "trainer.max_steps=4"], "data", "no environment gives the prompts"),
        (["data=none", BOTH, "trainer.max_steps=4"], "data", "env.factories picks each row's environment"),
        (["data=none", COUNTER, "trainer.max_steps=4", "data.system_prompt=hi"], "data.system_prompt", "reset()"),
        (
            [
                "data=none",
                COUNTER,
                "trainer.max_steps=4",
                "+data.rewards.c._target_=grpo_exp.training.rewards.correctness",
            ],
            "data.answer_column",
            "data=none",
        ),
    ],
)
def test_data_none_is_refused_where_trl_would_fail(overrides, key, why):
    found = [p for p in problems("action=plan", *overrides) if p.key == key]
    assert found and why in found[0].why, problems("action=plan", *overrides)


def test_multi_environment_rows_need_no_prompt(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"environment": "counter", "start": 1}\n{"environment": "echo", "word": "w"}\n' * 8)
    base = ["action=plan", "data=hf", f"data.path={rows}", "data.rewards={}"]
    assert problems(*base, BOTH) == []
    assert "data.prompt_column" in problem_keys(problems(*base[:-1], "env=calculator"))  # no environment: needed


def test_the_tool_schemas_are_the_warm_starts_and_its_cache_key():
    from grpo_exp.models.model_info import tiny_model_path

    mine = compose_cfg("env.tools=[tests.user_code.multiply,tests.user_code.async_add]")
    (tools,) = env.tool_sets(mine)
    assert [t["function"]["name"] for t in tools] == ["multiply", "async_add"]
    assert tools[0]["function"]["parameters"]["properties"]["a"] == {
        "type": "integer",
        "description": "The first integer.",
    }
    both = env.tool_sets(compose_cfg("env.tools=[tests.user_code.multiply]", BOTH))
    assert [[t["function"]["name"] for t in s] for s in both] == [["multiply", "increment"], ["multiply", "echo"]]
    assert env.tool_sets(compose_cfg()) == []
    paths = {tiny_model_path(c.model, env.tool_sets(c)) for c in (compose_cfg(), mine, compose_cfg("env=calculator"))}
    assert len(paths) == 3


def test_the_plan_says_whose_tool_calls_they_are_and_where_the_code_runs(tmp_path):
    notes = planned("env.tools=[tests.user_code.multiply,tests.user_code.async_add]").memory.notes
    assert any("warm-started on calls of this run's tools (multiply, async_add" in n for n in notes)
    assert any("the directory grpo_exp is started in (env.working_dir=null)" in n for n in notes)
    real = planned("env=calculator", "model=qwen7b", "topology=1x8", f"env.working_dir={tmp_path}").memory.notes
    assert any("are Qwen/Qwen2.5-7B-Instruct's own" in n for n in real)
    assert any(f"run in {tmp_path}" in n for n in real)


def test_a_working_dir_that_is_not_there_is_refused_before_launch(tmp_path):
    from grpo_exp.launching import preflight

    cfg = compose_cfg("env=calculator", f"env.working_dir={tmp_path}")
    assert preflight.check_working_dir(cfg) == []
    cfg.env.working_dir = str(tmp_path / "gone")
    (found,) = preflight.check_working_dir(cfg)
    assert found.key == "env.working_dir" and "gone" in found.why


def test_an_environment_server_that_does_not_answer_is_refused_before_launch():
    """An OpenEnv-style client names its server's base_url; preflight calls it (any HTTP answer counts)."""
    import http.server
    import socket
    import threading

    from grpo_exp.launching import preflight

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    try:
        up = compose_cfg(
            f"env.factory={{_target_: tests.user_code.Counter, base_url: 'http://127.0.0.1:{server.server_port}'}}"
        )
        assert preflight.check_environment_servers(up) == []
        down = compose_cfg(f"env.factory={{_target_: tests.user_code.Counter, base_url: 'http://127.0.0.1:{closed}'}}")
        (found,) = preflight.check_environment_servers(down, timeout_s=2)
        assert found.key == "env.factory.base_url" and "does not answer" in found.why
        assert any("base_url" in n and "action=run checks" in n for n in preflight.unchecked_data(down))
    finally:
        server.shutdown()
