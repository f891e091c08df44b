"""The data a run reads, checked by the driver before launch (data/columns_and_rows.py, data/files.py)."""

import json

import pytest
from omegaconf import OmegaConf

from grpo_exp.config.rewards import reward_columns
from grpo_exp.data import columns_and_rows
from tests.helpers import compose_cfg, problem_keys, problems

ROWS = [{"question": f"What is {a} + {a}?", "solution": str(2 * a), "level": a % 3} for a in range(8)]


def data_cfg(path, **extra) -> "OmegaConf":
    return compose_cfg("data=hf", f"data.path={path}", *[f"data.{k}={v}" for k, v in extra.items()])


def data_problems(path, **extra):
    cfg = data_cfg(path, **extra)
    return columns_and_rows.check(cfg.data, reward_columns(cfg))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from datasets import Dataset, DatasetDict

    root = tmp_path_factory.mktemp("data")
    ds = Dataset.from_list(ROWS)
    ds.to_parquet(root / "d.parquet")
    ds.to_csv(root / "d.csv", index=False)
    ds.to_json(root / "d.jsonl")
    (root / "d.json").write_text(json.dumps(ROWS))
    ds.save_to_disk(root / "saved")
    DatasetDict({"train": ds, "test": ds}).save_to_disk(root / "saved_dict")
    return root


@pytest.mark.parametrize("name", ["d.parquet", "d.csv", "d.jsonl", "d.json", "saved", "saved_dict"])
def test_every_format_with_renamed_columns_passes(files, name):
    assert data_problems(files / name, prompt_column="question", answer_column="solution") == []


@pytest.mark.parametrize("name", ["d.parquet", "d.csv", "d.jsonl", "saved"])
def test_missing_columns_are_named_per_format(files, name):
    found = data_problems(files / name)  # default columns: prompt, answer
    assert problem_keys(found) == ["data.prompt_column", "data.answer_column"]
    assert (
        "question" in found[0].fix
        and "data.rewards.correctness, data.rewards.answer_closeness need the reference answers" in found[1].why
    )


def test_extra_column_a_reward_needs(files, monkeypatch):
    cfg = compose_cfg(
        "data=hf",
        f"data.path={files / 'd.parquet'}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "+data.rewards.probe._target_=tests.memory_hog.record_columns",
    )
    assert reward_columns(cfg)["probe"] == ["level"]  # a required argument TRL does not supply
    assert columns_and_rows.check(cfg.data, reward_columns(cfg)) == []
    cfg = compose_cfg(
        "data=hf",
        f"data.path={files / 'd.parquet'}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "+data.rewards.probe._target_=tests.memory_hog.record_columns",
        "+data.rewards.probe.level=1",
    )
    assert reward_columns(cfg)["probe"] == []  # bound in the config


@pytest.mark.parametrize("name", ["d.parquet", "d.csv", "d.jsonl", "d.json", "saved", "saved_dict"])
def test_rows_are_counted_per_format(files, name):
    cfg = data_cfg(files / name, prompt_column="question", answer_column="solution")
    assert columns_and_rows.check(cfg.data, reward_columns(cfg), prompts_per_batch=len(ROWS)) == []
    found = columns_and_rows.check(cfg.data, reward_columns(cfg), prompts_per_batch=len(ROWS) + 1)
    assert (
        problem_keys(found) == ["data.path"]
        and f"holds {len(ROWS)} prompts, too few" in found[0].why
        and "0 steps" in found[0].why
    )


def test_too_few_prompts_for_one_generation_batch_are_refused(files):
    # 2 ranks x per_device_train_batch_size 8 x steps_per_generation 1 = 16 completions = 8 prompts x 2 generations
    batch = (
        "trainer.per_device_train_batch_size=8",
        "trainer.gradient_accumulation_steps=1",
        "trainer.num_generations=2",
    )
    small = ("data=hf", f"data.path={files / 'd.jsonl'}", "data.prompt_column=question", "data.answer_column=solution")
    assert problems(*small, *batch) == []  # 8 rows: exactly one batch
    found = problems(*small, *batch, "trainer.per_device_train_batch_size=16")
    assert problem_keys(found) == ["data.path"] and "one generation batch takes 16 distinct prompts" in found[0].why
    found = problems(*small, *batch, "data.num_samples=5")
    assert problem_keys(found) == ["data.num_samples"] and "data.num_samples=8 or more" in found[0].fix
    assert problem_keys(problems(*batch, "data.num_samples=7")) == ["data.num_samples"]  # toy_math: the same rule
    once = problems(*batch, "data.num_samples=0")
    assert problem_keys(once) == ["data.num_samples"]  # reported once, as out of range
    # a plan checks the data it can see as well: this run would train 0 steps wherever it is planned
    planned = problems(*small, *batch, "trainer.per_device_train_batch_size=16", "action=plan")
    assert problem_keys(planned) == ["data.path"]


def test_missing_split_of_a_saved_dataset_dict(files):
    assert problem_keys(
        data_problems(files / "saved_dict", split="validation", prompt_column="question", answer_column="solution")
    ) == ["data.split"]


def test_broken_files(tmp_path):
    (tmp_path / "bad.jsonl").write_text(
        '{"prompt": "a", "answer": "1"}\n{"prompt": \n\n{"prompt": "b", "answer": "2"}\n[1]\n'
    )
    found = data_problems(tmp_path / "bad.jsonl")
    assert [p.why.split(" (")[0] for p in found] == [f"{tmp_path / 'bad.jsonl'} line 2 is not valid JSON"]
    (tmp_path / "arr.jsonl").write_text('{"prompt": "a", "answer": "1"}\n[1]\n')
    assert "line 2 is not a JSON object" in data_problems(tmp_path / "arr.jsonl")[0].why
    (tmp_path / "partial.jsonl").write_text('{"prompt": "a", "answer": "1"}\n{"answer": "2"}\n')
    assert "missing from 1 row(s)" in data_problems(tmp_path / "partial.jsonl")[0].why
    (tmp_path / "empty.csv").write_text("prompt,answer\n")
    assert "holds no rows" in data_problems(tmp_path / "empty.csv")[0].why
    (tmp_path / "ragged.csv").write_text("prompt,answer\nwhat,1\nwhat,1,extra\n")
    assert "line 3 has 3 fields" in data_problems(tmp_path / "ragged.csv")[0].why
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    assert "not a readable parquet file" in data_problems(tmp_path / "junk.parquet")[0].why
    (tmp_path / "x.txt").write_text("hello")
    assert "not a format grpo_exp reads" in data_problems(tmp_path / "x.txt")[0].why
    assert "does not exist" in data_problems(tmp_path / "missing.parquet")[0].why


def test_answer_rename_would_clobber_a_column(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "answer": "1", "solution": "1"}\n')
    assert "would replace the existing 'answer'" in data_problems(tmp_path / "d.jsonl", answer_column="solution")[0].why


def test_toy_math_satisfies_the_default_rewards():
    cfg = compose_cfg()
    assert columns_and_rows.check(cfg.data, reward_columns(cfg)) == []
