"""The reward functions grpo_exp ships, on real completions."""

import pytest

from grpo_exp.training import rewards


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<think>7+5</think><answer>12</answer>", "12"),
        ("so the answer is 1,234.", "1234"),
        ("<answer> -3 </answer> and then 99", "-3"),
        ("no number here", "no number here"),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert rewards.extract_answer(text) == expected


def test_correctness_and_format_on_chat_completions():
    completions = [
        [{"role": "assistant", "content": "<think>2*21</think><answer>42</answer>"}],
        [{"role": "assistant", "content": "I think 41"}],
        [{"role": "assistant", "content": "<answer>42.0</answer>"}],
    ]
    assert rewards.correctness(completions, answer=["42", "42", "42"]) == [1.0, 0.0, 1.0]
    assert rewards.think_answer_format(completions) == [1.0, 0.0, 0.0]


def test_answer_closeness_is_dense_and_peaks_at_the_answer():
    scores = rewards.answer_closeness(["10", "12", "20", "none"], answer=["10"] * 4)
    assert scores[0] == 1.0 and 1.0 > scores[1] > scores[2] > 0.0 and scores[3] == 0.0
