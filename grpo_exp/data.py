"""Datasets as TRL's GRPOTrainer wants them: a `prompt` column of chat messages and an `answer`
column that the reward functions receive as a keyword argument.

`data.loader` picks the function below; `data.max_prompt_length` then drops prompts longer than
that many tokens (chat template applied) and logs how many went: TRL has no prompt length limit,
and long prompts are the first thing to cut when GRPO runs out of memory.
"""

import logging
import random
from typing import TYPE_CHECKING

from omegaconf import DictConfig

if TYPE_CHECKING:
    from datasets import Dataset

# `datasets` is imported inside the functions: the driver imports this module for LOADERS only.

log = logging.getLogger(__name__)

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def toy_math(cfg: DictConfig, seed: int) -> "Dataset":
    """Arithmetic questions with exact integer answers, generated from the seed (no download)."""
    from datasets import Dataset

    rng = random.Random(seed)
    rows = []
    for _ in range(cfg.num_samples or 256):
        a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice(list(_OPS))
        rows.append({"question": f"What is {a} {op} {b}?", "answer": str(_OPS[op](a, b))})
    return Dataset.from_list(rows)


def gsm8k(cfg: DictConfig, seed: int) -> "Dataset":
    """GSM8K from the hub id in data.path, or from a local .json/.jsonl file with its columns."""
    raw = _load(cfg.path, cfg.subset, cfg.split)
    # GSM8K answers end in "#### <number>"; the reasoning before it is not the reward target.
    return raw.map(
        lambda row: {"question": row["question"], "answer": row["answer"].split("####")[-1].strip()},
        remove_columns=[c for c in raw.column_names if c not in ("question", "answer")],
    )


def jsonl(cfg: DictConfig, seed: int) -> "Dataset":
    """A local JSON-lines file with `prompt` (string or chat messages) and `answer` columns."""
    raw = _load(cfg.path, None, cfg.split)
    return raw.rename_column("prompt", "question") if "prompt" in raw.column_names else raw


LOADERS = {"toy_math": toy_math, "gsm8k": gsm8k, "jsonl": jsonl}


def _load(path: str, subset: str | None, split: str) -> "Dataset":
    from datasets import load_dataset

    if path.endswith((".json", ".jsonl")):
        return load_dataset("json", data_files=path, split="train")
    return load_dataset(path, subset, split=split)


def to_chat(question, system_prompt: str | None) -> list[dict]:
    if isinstance(question, list):  # already chat messages
        messages = list(question)
    else:
        messages = [{"role": "user", "content": str(question)}]
    if system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def build_dataset(cfg: DictConfig, tokenizer, seed: int) -> "Dataset":
    """The training dataset for `cfg` (the `data` group), chat-formatted and length-filtered."""
    ds = LOADERS[cfg.loader](cfg, seed)
    if cfg.num_samples is not None and len(ds) > cfg.num_samples:
        ds = ds.select(range(cfg.num_samples))
    ds = ds.map(lambda row: {"prompt": to_chat(row["question"], cfg.system_prompt)}, remove_columns=["question"])
    if cfg.max_prompt_length is not None:
        ds = drop_long_prompts(ds, tokenizer, cfg.max_prompt_length)
    return ds


def drop_long_prompts(ds: "Dataset", tokenizer, max_tokens: int) -> "Dataset":
    def prompt_tokens(row):
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return {"prompt_tokens": len(ids)}

    measured = ds.map(prompt_tokens)
    kept = measured.filter(lambda row: row["prompt_tokens"] <= max_tokens).remove_columns("prompt_tokens")
    dropped = len(ds) - len(kept)
    log.info(
        "data.max_prompt_length=%d: dropped %d of %d prompts (longest was %d tokens)",
        max_tokens, dropped, len(ds), max(measured["prompt_tokens"], default=0),
    )
    if len(kept) == 0:
        raise ValueError(
            f"data.max_prompt_length={max_tokens} dropped every prompt; the shortest has "
            f"{min(measured['prompt_tokens'])} tokens. Raise data.max_prompt_length."
        )
    return kept
