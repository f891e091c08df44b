"""The datasets the worker builds: generated toy math, GSM8K and data=hf files in every format."""

import pytest
from omegaconf import OmegaConf

from grpo_exp.data import gsm8k, toy_math
from grpo_exp.training import data
from tests.helpers import compose_cfg


def test_toy_math_is_deterministic_and_exact():
    cfg = OmegaConf.create({"num_samples": 50})
    first, second = toy_math.load(cfg, seed=1), toy_math.load(cfg, seed=1)
    assert first.to_list() == second.to_list() and len(first) == 50
    for row in first:
        a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
        assert eval(f"{a}{op}{b}") == int(row["answer"])


def test_gsm8k_loader_reads_local_file_and_extracts_final_answer():
    cfg = compose_cfg("data=gsm8k", "data.path=tests/fixtures/gsm8k_sample.jsonl").data
    ds = gsm8k.load(cfg, seed=0)
    assert ds.column_names == ["question", "answer"]
    assert ds[0]["answer"] == "72" and ds[7]["answer"] == "990"


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "save_to_disk"])
def test_data_hf_reads_each_format_with_its_own_column_names(tmp_path, fmt):
    """The worker's loader on each local format: prompt and answer columns renamed, every other column
    kept for the reward functions (test_e2e_config trains on one of them)."""
    from datasets import Dataset

    rows = [{"question": f"What is {a} + {a}?", "solution": str(2 * a), "level": a % 3} for a in range(8)]
    ds = Dataset.from_list(rows)
    path = {"parquet": "d.parquet", "csv": "d.csv", "json": "d.jsonl", "save_to_disk": "saved"}[fmt]
    write = {"parquet": ds.to_parquet, "csv": lambda p: ds.to_csv(p, index=False), "json": ds.to_json}
    write.get(fmt, ds.save_to_disk)(tmp_path / path)
    cfg = compose_cfg(
        "data=hf",
        f"data.path={tmp_path / path}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "data.max_prompt_length=null",  # no tokenizer needed
    )
    loaded = data.build_dataset(cfg.data, tokenizer=None, seed=0)
    assert sorted(loaded.column_names) == ["answer", "level", "prompt"] and len(loaded) == 8
    assert loaded[3]["prompt"] == [{"role": "user", "content": "What is 3 + 3?"}]
    assert str(loaded[3]["answer"]) == "6" and loaded[3]["level"] == 0


def test_to_chat_adds_system_prompt_once():
    assert data.to_chat("q", "sys") == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    already = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert data.to_chat(already, "other") == already
