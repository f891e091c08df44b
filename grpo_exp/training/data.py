"""Datasets as TRL's GRPOTrainer wants them: a `prompt` column (chat messages, or raw text) and
every other column kept, because TRL hands each one to the reward functions as a keyword argument
(grpo_exp's own rewards take `answer`).

`data.loader` names the function that reads the rows (grpo_exp/data/: `toy_math` generated, `gsm8k` with its
final answers extracted, `files` anything `datasets.load_dataset` reads, `none` when the environment's reset()
gives every prompt; or the user's own, by `_target_`). `data.prompt_column` and
`data.answer_column` become `prompt` and `answer`. `data.max_prompt_length` then drops prompts
longer than that many tokens and logs how many went: TRL has no prompt length limit, and long
prompts are the first thing to cut when GRPO runs out of memory.

The driver checks the data before launch (data/columns_and_rows.py); `datasets` is imported inside the loaders.
"""

import logging
from typing import TYPE_CHECKING, cast

from omegaconf import DictConfig, OmegaConf

from grpo_exp import data as loaders
from grpo_exp.data import files

if TYPE_CHECKING:
    from datasets import Dataset

log = logging.getLogger(__name__)


def to_chat(prompt, system_prompt: str | None) -> list[dict]:
    if isinstance(prompt, list):  # already chat messages
        messages = list(prompt)
    else:
        messages = [{"role": "user", "content": str(prompt)}]
    if system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def build_dataset(cfg: DictConfig, tokenizer, seed: int) -> "Dataset | None":
    """The training dataset for `cfg` (the `data` group): columns renamed, prompts formatted,
    too-long prompts dropped; every other column stays for the reward functions. None for data=none.
    Rows without a prompt (TRL's multi-environment data: an `environment` column and that environment's
    own) keep none: each environment's reset() gives it, as TRL does."""
    ds = loaders.load(cfg, seed)
    if ds is None:
        return None
    if cfg.num_samples is not None and len(ds) > cfg.num_samples:
        ds = ds.select(range(cfg.num_samples))
    renames = {cfg.prompt_column: "prompt", cfg.answer_column: "answer"}
    ds = ds.rename_columns({old: new for old, new in renames.items() if old != new and old in ds.column_names})
    if "prompt" not in ds.column_names:
        log.info("dataset: %d rows without prompts: each environment's reset() gives the prompt", len(ds))
        return ds
    if cfg.conversational:
        ds = ds.map(lambda row: {"prompt": to_chat(row["prompt"], cfg.system_prompt)})
    if cfg.max_prompt_length is not None:
        ds = drop_long_prompts(ds, tokenizer, cfg.max_prompt_length)
    log.info(
        "dataset: %d rows, columns %s (every column but prompt reaches the reward functions)", len(ds), ds.column_names
    )
    return ds


def build_eval_dataset(cfg: DictConfig, tokenizer, seed: int) -> "Dataset | None":
    """The held-out prompts (data.eval_path: a file or directory read like data=hf, with the same
    columns; or data.eval_split of data.path), prepared like the training prompts; None without them."""
    if cfg.eval_path is None and cfg.eval_split is None:
        return None
    held_out: dict[str, object] = {"num_samples": None}
    if cfg.eval_path is not None:
        read_as_files = {"_target_": f"{files.__name__}.load"}  # a file or directory, read as data=hf reads it
        held_out |= {"loader": read_as_files, "path": cfg.eval_path, "split": cfg.eval_split or "train"}
    else:
        held_out |= {"split": cfg.eval_split}
    ds = build_dataset(cast(DictConfig, OmegaConf.merge(cfg, held_out)), tokenizer, seed)
    if ds is not None:  # data=none reads no split of its own
        log.info("eval dataset: %d rows", len(ds))
    return ds


def drop_long_prompts(ds: "Dataset", tokenizer, max_tokens: int) -> "Dataset":
    def prompt_tokens(row):
        if isinstance(row["prompt"], list):
            ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        else:
            ids = tokenizer(row["prompt"])["input_ids"]
        return {"prompt_tokens": len(ids)}

    measured = ds.map(prompt_tokens)
    kept = measured.filter(lambda row: row["prompt_tokens"] <= max_tokens).remove_columns("prompt_tokens")
    dropped = len(ds) - len(kept)
    log.info(
        "data.max_prompt_length=%d: dropped %d of %d prompts (longest was %d tokens)",
        max_tokens,
        dropped,
        len(ds),
        max(measured["prompt_tokens"], default=0),
    )
    if len(kept) == 0:
        raise ValueError(
            f"data.max_prompt_length={max_tokens} dropped every prompt; the shortest has "
            f"{min(measured['prompt_tokens'])} tokens. Raise data.max_prompt_length."
        )
    return kept
