"""The agentic pieces below the trainer: the shipped environments, the tiny model's tool-calling chat template
(as TRL checks and parses it), the warm start that teaches it the call format, and the measured trainer's
accounting of tools (reset timing, dropped results)."""

import pytest

from grpo_exp.training import episodes
from grpo_exp.training.environments import NumberGame, calculator
from tests.helpers import compose_cfg


def test_calculator_does_whole_number_arithmetic_and_nothing_else():
    assert calculator("17 + 25") == "42" and calculator(" -3 * (4 - 6) ") == "6"
    for bad in ("__import__('os')", "2 ** 10", "1 / 2", "9999999 * 9", "x + 1", "2.5 + 1"):
        with pytest.raises((ValueError, SyntaxError)):
            calculator(bad)


def test_number_game_plays_from_the_rows_answer():
    game = NumberGame(low=0, high=99)
    assert "from 0 to 99" in game.reset(answer="142", prompt="ignored")
    assert game.secret == 42 and game.get_reward() == 0.0
    assert game.guess(10) == "higher" and game.guess(90) == "lower"
    assert 0 < game.get_reward() < 0.5
    assert game.guess(42) == "correct" and game.get_reward() == 1.0
    game.reset(answer="not a number", prompt="p")  # a row without a numeric answer still gets a game
    assert 0 <= game.secret <= 99 and not game.found


def test_dropped_results_counts_episodes_cut_at_a_call_with_rounds_left():
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}
    result = {"role": "tool", "name": "f", "content": "1"}
    answer = {"role": "assistant", "content": "<answer>1</answer>"}
    cases = [
        [answer],  # no call
        [call, result, answer],  # a round, then an answer
        [call],  # its result rolled back at the first round: dropped
        [call, result, call],  # second call's result rolled back: dropped
        [call, result, call, result, call],  # out of rounds (2), not dropped
    ]
    assert episodes.dropped_results(cases, max_iterations=2) == 2
    assert episodes.dropped_results(cases, max_iterations=3) == 3


def test_environment_resets_are_the_tools_phase_and_the_environment_stays_itself():
    from grpo_exp.training import phases, probes

    memory = phases.PhaseMemory(probes.MemoryProbe())
    factory = episodes.measured_resets(lambda: NumberGame(low=0, high=9), memory)
    game = factory()
    assert type(game) is NumberGame  # TRL lists tools and matches get_reward on the class
    assert game.reset(answer="3") and game.secret == 3
    assert memory.seconds["tools"] > 0
    both = episodes.measured_resets({"a": NumberGame, "b": NumberGame}, memory)
    assert set(both) == {"a", "b"} and both["b"]().reset(answer="1")


@pytest.fixture(scope="module")
def tiny_tokenizer(model_cache):
    import os

    from transformers import AutoTokenizer

    os.environ.setdefault("GRPO_EXP_CACHE", str(model_cache))
    from grpo_exp.training import build

    return AutoTokenizer.from_pretrained(build.model_path(compose_cfg()))


@pytest.mark.slow  # imports trl (~5 s)
def test_the_tiny_chat_template_passes_trls_tool_checks_and_round_trips_a_call(tiny_tokenizer):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

    tok = tiny_tokenizer
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3 + 4"}}}
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    render = dict(tools=[calculator], tokenize=True, return_dict=False)
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, **render)
    full = tok.apply_chat_template([*messages, {"role": "assistant", "content": "", "tool_calls": [call]}], **render)
    assert tok.decode(prompt).startswith("<|im_start|>system\ntools: calculator<|im_end|>")
    parsed = parse_response(tok, full[len(prompt) :], prefix=prompt, tools=[calculator])  # as TRL parses it
    assert parsed["tool_calls"] == [call]
    for tag in ("<tool_call>", "</tool_call>"):  # whole tokens, kept by decoding
        assert len(tok(tag, add_special_tokens=False).input_ids) == 1


@pytest.mark.slow  # the tools model's warm start (~10 s), built once per session in the shared cache
def test_the_warm_started_tiny_model_writes_tool_calls_itself(model_cache):
    """What env=calculator's first steps rely on: sampled at TRL's temperature from the model's own tokens, most
    completions are well-formed calls of a tool the prompt offers, with arguments the tool accepts."""
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("GRPO_EXP_CACHE", str(model_cache))
    from trl.chat_template_utils import parse_response

    from grpo_exp.training import build

    path = build.model_path(compose_cfg("env=calculator"))
    assert "-tools-" in path  # the warm-started variant, beside the plain one
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    torch.manual_seed(0)
    questions = [f"What is {a} + {b}?" for a, b in zip(range(3, 99, 6), range(90, 0, -6), strict=False)]
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": q}], tools=[calculator], add_generation_prompt=True, return_dict=False
        )
        for q in questions
    ]
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    out = model.generate(ids, attention_mask=(ids != tok.pad_token_id).long(), do_sample=True, max_new_tokens=40)
    calls = 0
    for prompt, row in zip(prompts, out[:, width:].tolist(), strict=True):
        parsed = parse_response(tok, row, prefix=prompt, tools=[calculator])
        for call in parsed.get("tool_calls") or []:
            calculator(**call["function"]["arguments"])  # a call the tool accepts
            calls += 1
    assert calls >= len(prompts) // 2, f"{calls} well-formed calls in {len(prompts)} completions"
