"""Reward functions, chosen in config as `data.rewards.<name>._target_`.

TRL calls each with the batch's `completions` (chat messages or strings) plus every other
dataset column as a keyword argument (here `answer`), and expects one float per completion.
Pure Python: no torch.
"""

import re

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_THINK_ANSWER = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def completion_text(completion) -> str:
    """A completion is a string, or a list of chat messages whose last one is the model's."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"] if completion else ""


def extract_answer(text: str) -> str | None:
    """The final answer: inside <answer></answer> if present, else the last number in the text."""
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        text = tagged[-1]
    numbers = _NUMBER.findall(text)
    if numbers:
        return numbers[-1].replace(",", "").rstrip(".")
    stripped = text.strip()
    return stripped or None


def _same_answer(predicted: str | None, expected: str) -> bool:
    if predicted is None:
        return False
    try:
        return float(predicted) == float(expected.replace(",", ""))
    except ValueError:
        return predicted.strip() == expected.strip()


def correctness(completions, answer, **kwargs) -> list[float]:
    """1.0 where the completion's final answer equals the dataset's exact answer, else 0.0."""
    return [
        1.0 if _same_answer(extract_answer(completion_text(c)), str(a)) else 0.0
        for c, a in zip(completions, answer, strict=True)
    ]


def think_answer_format(completions, **kwargs) -> list[float]:
    """1.0 for `<think>...</think><answer>...</answer>` and nothing else, else 0.0."""
    return [1.0 if _THINK_ANSWER.match(completion_text(c)) else 0.0 for c in completions]


def answer_closeness(completions, answer, **kwargs) -> list[float]:
    """Partial credit in [0, 1]: 1 / (1 + relative distance) between the final number and the answer.

    Dense where `correctness` is sparse: it gives an untrained model's completions different
    rewards, so GRPO advantages (reward minus group mean) are non-zero from the first step.
    """
    scores = []
    for c, a in zip(completions, answer, strict=True):
        predicted = extract_answer(completion_text(c))
        if predicted is None:  # no number in the completion
            scores.append(0.0)
            continue
        try:
            distance = abs(float(predicted) - float(str(a).replace(",", ""))) / (
                abs(float(str(a).replace(",", ""))) + 1.0
            )
            scores.append(1.0 / (1.0 + distance))
        except (TypeError, ValueError):
            scores.append(0.0)
    return scores


def tag_count(completions, **kwargs) -> list[float]:
    """0.25 for each of `<think>\\n`, `\\n</think>\\n`, `\\n<answer>\\n`, `\\n</answer>` found exactly once
    (open-r1's tag_count_reward: partial credit on the way to the full think/answer format)."""
    tags = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
    return [sum(0.25 for tag in tags if completion_text(c).count(tag) == 1) for c in completions]
