"""Stage 3 for agentic runs: the model's chat template must render a tool conversation and TRL must be able to
parse calls out of its responses; env.factories' environment column must name only listed environments."""

import json
import shutil

import pytest

from tests.helpers import compose_cfg, problems

PLAIN_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer_variants(tmp_path_factory, model_cache):
    """The tiny model saved three ways: as built (its template renders tools, its response template parses
    them), with a ChatML template that drops tool calls, and without the response template."""
    import os

    from transformers import AutoTokenizer

    os.environ.setdefault("GRPO_EXP_CACHE", str(model_cache))
    from grpo_exp.training import build

    tiny = build.model_path(compose_cfg())
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for name in ("as_built", "no_tools", "no_parser"):
        shutil.copytree(tiny, root / name)
        tok = AutoTokenizer.from_pretrained(root / name)
        if name == "no_tools":
            tok.chat_template = PLAIN_CHATML
        if name == "no_parser":
            tok.response_template = None
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.mark.slow  # imports trl's chat-template tools (~5 s), as the driver does for a run with tools
def test_a_chat_template_that_cannot_do_tools_is_refused_before_launch(tokenizer_variants):
    def found(name: str) -> list[str]:
        model = ["model=auto", f"model.name_or_path={tokenizer_variants[name]}", "env=calculator"]
        return [p.why for p in problems(*model) if p.key == "model.name_or_path"]

    assert found("as_built") == []
    (why,) = found("no_tools")
    assert "cannot render a tool conversation" in why
    (why,) = found("no_parser")
    assert "cannot parse tool calls" in why
    # without tools the template is not read
    plain = ["model=auto", f"model.name_or_path={tokenizer_variants['no_tools']}"]
    assert [p for p in problems(*plain) if p.key == "model.name_or_path"] == []


def test_the_environment_column_names_only_listed_environments(tmp_path):
    rows = [{"prompt": "What is 1 + 2?", "answer": "3", "environment": env} for env in ("game", "maze", "game")]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows * 30))
    game = "env.factories.game._target_=grpo_exp.training.environments.NumberGame"
    found = [p for p in problems("data=hf", f"data.path={data}", f"+{game}") if p.key == "env.factories"]
    assert len(found) == 1 and "['maze']" in found[0].why and "env.factories.maze" in found[0].fix
    maze = "env.factories.maze._target_=grpo_exp.training.environments.NumberGame"
    assert [
        p for p in problems("data=hf", f"data.path={data}", f"+{game}", f"+{maze}") if p.key.startswith("env")
    ] == []
    (toy,) = [p for p in problems(f"+{game}") if p.key == "env.factories"]
    assert "toy_math has none" in toy.why


@pytest.mark.parametrize("suffix", [".csv", ".parquet", "saved"])
def test_the_environment_column_is_read_from_every_local_format(tmp_path, suffix):
    from datasets import Dataset

    from grpo_exp.data import files as data_files

    ds = Dataset.from_list([{"prompt": "p", "environment": e} for e in ("a", "b", "a")])
    path = tmp_path / f"rows{suffix}" if suffix != "saved" else tmp_path / "saved"
    {".csv": ds.to_csv, ".parquet": ds.to_parquet, "saved": ds.save_to_disk}[suffix](str(path))
    data = compose_cfg("data=hf", f"data.path={path}").data
    assert data_files.column_values(data, "environment") == {"a", "b"}
    assert data_files.column_values(data, "no_such_column") is None
