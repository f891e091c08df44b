"""Data loaders as components: the shipped ones are modules of grpo_exp/data/ named by conf/data/*.yaml's
`_target_`, and a user's own (`data.loader._target_=my_pkg.load`) plans, is checked before launch as they are
(columns, rows, prompts) and trains."""

import importlib

import pytest
from omegaconf import OmegaConf

from grpo_exp import data as loaders
from tests.helpers import CONF, planned, problem_keys, problems, report

SHIPPED = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))


@pytest.mark.parametrize("option", SHIPPED)
def test_every_data_option_names_a_loader_component(option):
    target = OmegaConf.load(CONF / "data" / f"{option}.yaml").loader._target_
    module = importlib.import_module(target.rpartition(".")[0])
    assert module.__name__.startswith("grpo_exp.data.") and callable(module.load) and callable(module.scan)


def test_a_users_loader_plans_and_its_rows_and_prompts_are_checked():
    found = planned("data.loader._target_=tests.user_code.doubling_prompts")
    assert loaders.name(found.cfg.data) == "tests.user_code.doubling_prompts"
    assert loaders.prompts(found.cfg.data, 42)[:2] == ["What is 0 + 0?", "What is 1 + 1?"]
    whole = planned("data.loader={_target_: tests.user_code.doubling_prompts, rows: 128}")
    assert loaders.scan(whole.cfg.data)[1] == 128  # the mapping's own arguments reach the loader


@pytest.mark.parametrize(
    ("loader", "key", "says"),
    [
        ("tests.user_code.questions_without_prompts", "data.prompt_column", "question"),
        ("tests.user_code.loader_that_raises", "data.loader", "FileNotFoundError: /data/my_prompts.parquet"),
        ("tests.user_code.loader_without_a_dataset", "data.loader", "returned list, not a datasets.Dataset"),
        ("tests.user_code.no_such_function", "data.loader", "does not import"),
    ],
)
def test_a_users_loader_is_refused_with_its_cause(loader, key, says):
    text, _ = report(f"data.loader._target_={loader}")
    assert text.startswith(f"{key}: ") and says in text, text


def test_too_few_rows_from_a_users_loader_are_refused():
    found = problems("data.loader={_target_: tests.user_code.doubling_prompts, rows: 1}", "action=plan")
    assert problem_keys(found) == ["data.loader"] and "holds 1 prompts, too few" in found[0].why, found


def test_a_loader_that_is_not_a_function_by_target_is_refused():
    text, _ = report("data.loader=toy_math")
    assert text.startswith("data.loader: ") and "Dict" in text  # the schema's type: a mapping
    text, _ = report("data.loader={}")
    assert text.startswith("data.loader: is {}") and "data=toy_math" in text


@pytest.mark.e2e
def test_a_users_loader_trains(cli):
    result, run_dir = cli(
        "data.loader={_target_: tests.user_code.doubling_prompts, rows: 32}", "trainer.max_steps=1", "logger=none"
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "dataset: 32 rows" in (run_dir / "train.log").read_text()


def test_a_run_dir_frozen_with_a_loader_word_still_reads():
    """Run dirs frozen before loaders were components (the H200 records among them) say data.loader: <word>."""
    for word, module in (("toy_math", "toy_math"), ("hf", "files"), ("gsm8k", "gsm8k"), ("none", "none")):
        data = OmegaConf.create({"loader": word})
        assert loaders.target(data) == f"grpo_exp.data.{module}.load"
