"""data=toy_math: arithmetic questions ("What is 17 + 25?") with exact integer answers, generated from the seed (no
download). Pure Python: the training data, the checks before launch and the plan's prompt lengths
(planning/prompt_tokens.py) read the same rows."""

import operator
import random

ROWS = 256  # toy_math's size when data.num_samples is null
SPLITS = False  # generated: no split to hold out (data.eval_path gives held-out prompts)
OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def rows(num_samples: int | None, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(num_samples or ROWS):
        a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice(list(OPERATIONS))
        out.append({"prompt": f"What is {a} {op} {b}?", "answer": str(OPERATIONS[op](a, b))})
    return out


def load(data, seed: int):
    from datasets import Dataset

    return Dataset.from_list(rows(data.num_samples, seed))


def scan(data) -> tuple[set[str], int | None, str]:
    return {"prompt", "answer"}, None if data.num_samples else ROWS, "toy_math"


def prompts(data, seed: int) -> list[str]:
    """Every prompt, before launch: the plan counts their tokens."""
    return [row["prompt"] for row in rows(data.num_samples, seed)]
