"""data=toy_math's rows: arithmetic questions with exact integer answers, generated from the seed (no download).
Pure Python: the training data (training/data.py) and the plan's prompt lengths (planning/prompt_tokens.py) read
the same rows."""

import operator
import random

ROWS = 256  # toy_math's size when data.num_samples is null
OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def rows(num_samples: int | None, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(num_samples or ROWS):
        a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice(list(OPERATIONS))
        out.append({"prompt": f"What is {a} {op} {b}?", "answer": str(OPERATIONS[op](a, b))})
    return out
