"""User code as people write it, run by the shared runs (tests/conftest.py): a reward that imports what it likes
(each library below was once hidden from workers whose run did not use it, `sys.modules[name] = None`, to start
faster; user code must find every one), TRL's docs' two tools, and two environments that own their prompts."""

import asyncio
import importlib
import json
from pathlib import Path

LIBRARIES = ("peft", "deepspeed", "bitsandbytes", "wandb", "mlflow", "trackio", "swanlab")
REPORT = "user_code_imports.json"  # written in the training processes' working directory (env.working_dir)


def imports_everything(completions, **kwargs) -> list[float]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = getattr(importlib.import_module(name), "__version__", "imported")
        except Exception as exc:  # the test names the library and the error
            found[name] = f"{type(exc).__name__}: {exc}"
    Path(REPORT).write_text(json.dumps(found))
    return [0.0] * len(completions)


# TRL's docs' tools, as a user writes them: type hints and a Google-style docstring are the whole schema.
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a * b


async def async_add(a: int, b: int) -> int:
    """Asynchronously add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    await asyncio.sleep(0.01)  # TRL runs an async tool on its own event loop
    return a + b


class Counter:
    """An environment that owns its data and its reward: reset() returns the whole prompt (data=none, or TRL's
    multi-environment rows, which carry only `environment` and this environment's own columns)."""

    def reset(self, start=0, **row) -> str:
        self.n = int(start)
        return f"The counter is at {self.n}. Call increment until it reaches {self.n + 3}."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: How much to add.
        """
        self.n += int(step)
        return f"counter: {self.n}"

    def get_reward(self) -> float:
        return 1.0 if self.n >= 3 else 0.0


class Echo:
    """A second environment for TRL's multi-environment rows."""

    def reset(self, word="hello", **row) -> str:
        self.word, self.said = word, ""
        return f"Make the echo tool say '{word}'."

    def echo(self, text: str) -> str:
        """Repeat a text.

        Args:
            text: The text to repeat.
        """
        self.said = text
        return text

    def get_reward(self) -> float:
        return float(self.said == self.word)


PROMPTS = "prompts_seen.jsonl"  # written in the training processes' working directory


def record_prompts(prompts, completions, **kwargs) -> list[float]:
    """A reward that scores nothing and writes down the last message of every prompt it is shown."""
    with open(PROMPTS, "a") as f:
        for prompt in prompts:
            f.write(json.dumps(prompt[-1]["content"] if isinstance(prompt, list) else prompt) + "\n")
    return [0.0] * len(completions)


# Data loaders as a user writes them (data.loader._target_=...): a function returning a datasets.Dataset.
def doubling_prompts(rows: int = 64, **kwargs):
    """Prompts whose answer is twice a number; `rows` from the loader's own mapping (data.loader.rows=...)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(rows)])


def questions_without_prompts(**kwargs):
    from datasets import Dataset

    return Dataset.from_list([{"question": "no prompt column", "answer": "1"}] * 64)


def loader_that_raises(**kwargs):
    raise FileNotFoundError("/data/my_prompts.parquet")


def loader_without_a_dataset(**kwargs):
    return [{"prompt": "a list, not a Dataset"}]


def minus_one(completions, **kwargs) -> list[float]:
    """A reward below zero for every completion: a sweep's failed trial must still score worse."""
    return [-1.0 for _ in completions]
