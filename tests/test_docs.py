"""The docs are run: every `python -m grpo_exp ...` / `grpo-exp ...` command in README.md and docs/ that a reader can
paste (no placeholder, no file or module of their own) is planned as the page shows it, without a traceback; the
output block README.md shows is what the program prints; every file, module and config key the docs name exists."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.__main__ import COMMANDS
from grpo_exp.config import keys, overrides
from tests.helpers import CONF, fast_lane, report, script

ROOT = CONF.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GROUP_KEYS = ("model", "data", "trainer", "vllm", "peft", "topology", "logger", "launcher", "env", "fsdp")


def fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of a page."""
    blocks, lang, current = [], None, []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if lang is None:
                lang, current = line[3:].strip(), []
            else:
                blocks.append((lang, "".join(current)))
                lang = None
        elif lang is not None:
            current.append(line)
    return blocks


def commands() -> list[tuple[str, list[str]]]:
    """(page, overrides) of each pasteable run command of the docs."""
    found = {}
    for page in PAGES:
        for lang, text in fenced_blocks(page):
            if lang not in ("", "bash", "sh", "console", "shell") or "invalid config" in text or "fix:" in text:
                continue  # a block that shows a refusal on purpose is checked by the tests of that refusal
            for line in text.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ").split("  #")[0].split(" # ")[0].strip()
                if not line.startswith(("python -m grpo_exp", "grpo-exp")):
                    continue
                words = shlex.split(line)
                if words[:3] != ["python", "-m", "grpo_exp"] and words[0] != "grpo-exp":
                    continue  # python -m grpo_exp.training.worker ...: a module's own command line
                args = words[3:] if words[0] == "python" else words[1:]
                if (
                    (args and args[0] in COMMANDS)
                    or not all("=" in a for a in args)
                    or any(
                        a.startswith(("-", "+sweep", "hydra.", "experiment=", "resume="))
                        or "/" in a
                        or "<" in a
                        or "..." in a
                        or ("_target_" in a and not re.search(r"_target_(: |=)my_\w+\.", a))  # the docs' own modules
                        or re.search(r"(?<!_target_: )(?<!_target_=)\bmy_", a)
                        for a in args
                    )
                ):
                    continue
                found.setdefault(tuple(args), page.name)
    return [(page, list(args)) for args, page in found.items()]


DOC_COMMANDS = commands()


def user_modules() -> dict[str, str]:
    """{module name: source} of the Python blocks the docs give a file name (`# my_envs.py` on their first line)."""
    found = {}
    for page in PAGES:
        for lang, text in fenced_blocks(page):
            named = re.match(r"# (my_\w+)\.py\n", text)
            if lang == "python" and named:
                found[named.group(1)] = text
    return found


@pytest.fixture(scope="module")
def users_code(tmp_path_factory):
    """The docs' own modules (my_envs.py, my_rewards.py), importable as a reader who saved them would have them."""
    folder = tmp_path_factory.mktemp("users_code")
    for name, source in user_modules().items():
        (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def test_the_docs_have_commands_to_run():
    assert len(DOC_COMMANDS) >= 15, DOC_COMMANDS
    assert {"my_envs", "my_rewards"} <= set(user_modules())
    assert any("my_envs.Maze" in " ".join(args) for _, args in DOC_COMMANDS)  # a user's own module, run as shown


@pytest.mark.parametrize(  # the fast lane: each page's first command
    "page,args",
    fast_lane(DOC_COMMANDS, lambda c: c == next(d for d in DOC_COMMANDS if d[0] == c[0])),
    ids=[" ".join(a) or "(defaults)" for _, a in DOC_COMMANDS],
)
def test_every_command_of_the_docs_plans(page, args, users_code):
    """Planned in-process through the driver's own steps: composed, finalized, checked, placed."""
    text, cfg = report(*[a for a in args if not a.startswith("action=")], "action=plan")
    assert cfg is not None and text == "", f"{page}: {' '.join(args)}\n{text}"


def run_cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`python -m grpo_exp <args>` as a reader runs it, at the 100 columns the docs' output blocks are printed at."""
    return subprocess.run(
        [sys.executable, "-m", "grpo_exp", *args, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )


def plan_block(output: str) -> str:
    """The part of a plan README.md shows: its first line (the card and the trainer's shape), the memory table and
    the ranked fixes."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("train: peak"))
    kept, fixes = [lines[0]], False
    for line in lines[start:]:
        if line.startswith("["):  # the log line that follows the plan
            break
        fixes = fixes or line.startswith("what would fit")
        if fixes or line.startswith(("train: peak", "vllm: peak", *"┏┃┡│├└")):  # not the notes, however they wrap
            kept.append(line.rstrip())
    return "\n".join(kept)


@pytest.mark.slow  # the real CLI in a subprocess
def test_the_readmes_plan_is_what_the_program_prints(tmp_path):
    (console,) = [text for lang, text in fenced_blocks(ROOT / "README.md") if lang == "console"]
    command, shown = console.split("\n", 1)
    args = shlex.split(command.removeprefix("$ "))[3:]
    result = run_cli(args, tmp_path)
    assert "Traceback" not in result.stderr
    assert plan_block(result.stdout) == shown.rstrip("\n"), (
        "README.md's plan block is stale; the program prints:\n" + plan_block(result.stdout)
    )


def test_every_file_the_docs_name_exists():
    named = set()
    for page in PAGES:
        named |= set(
            re.findall(
                r"`((?:grpo_exp|scripts|tests|benchmarks|conf|docs|examples|hydra_plugins)/[\w./-]+)`",
                page.read_text(),
            )
        )
        named |= {f"docs/{link}" for link in re.findall(r"\]\((?:docs/)?([\w-]+\.md)\)", page.read_text())}
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists() and "*" not in p and "<" not in p)
    assert not missing, missing


def test_every_config_key_the_docs_name_is_a_key():
    """`trainer.epsilon_high`, `vllm.weight_sync`, ...: a rename breaks this test, never the reader."""
    bad = {}
    for page in PAGES:
        for key in re.findall(r"`((?:%s)\.[a-z_][\w.]*)" % "|".join(GROUP_KEYS), page.read_text()):
            key = key.rstrip(".")
            if not overrides._allows(key.split(".")) and keys.home(key) is None:  # (a foreign name shown redirected)
                bad.setdefault(page.name, []).append(key)
    assert not bad, bad


def test_the_config_reference_is_generated_from_the_schema():
    reference = script("config_reference")
    page = (ROOT / "docs" / "config-reference.md").read_text()
    assert page == reference.page_with(reference.render(), page), "run: python scripts/config_reference.py --write"


def shown_outputs() -> list[tuple[str, list[str], list[str]]]:
    """(page, the command's arguments, the lines shown after it) of every output block the docs show for a
    `$ python -m grpo_exp ...` command; lines with `...` are abridged on purpose and not compared."""
    found = []
    for page in PAGES:
        for lang, text in fenced_blocks(page):
            if lang not in ("", "console") or not text.startswith("$ python -m grpo_exp"):
                continue
            for segment in text.split("$ ")[1:]:
                command, *shown = segment.rstrip("\n").split("\n")
                found.append((page.name, shlex.split(command)[3:], [line for line in shown if "..." not in line]))
    return found


SHOWN = shown_outputs()


@pytest.mark.slow  # the real CLI in a subprocess, per block
@pytest.mark.parametrize("page,args,shown", SHOWN, ids=[f"{p}: {' '.join(a)}"[:90] for p, a, _ in SHOWN])
def test_every_output_the_docs_show_is_what_the_program_prints(page, args, shown, tmp_path):
    result = run_cli(args, tmp_path)
    printed = {
        " ".join(line.replace(sys.executable, "python").split())
        for line in (result.stdout + result.stderr).splitlines()
    }
    stale = [line for line in shown if line.strip() and " ".join(line.split()) not in printed]
    assert "Traceback" not in result.stderr and not stale, f"{page}: lines the program no longer prints: {stale}"


def test_every_relative_link_resolves():
    """A link between pages is relative to the page that holds it (docs/a.md links `b.md`, not `docs/b.md`)."""
    broken = []
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def recipe_page_commands() -> list[list[str]]:
    """The arguments of every command in the recipe page's bash blocks, in the page's order."""
    found = []
    for lang, text in fenced_blocks(ROOT / "docs" / "from-trl-and-open-r1.md"):
        for line in text.splitlines() if lang == "bash" else []:
            words = shlex.split(line.split("  #")[0])
            if words[:1] == ["grpo-exp"]:
                found.append(words[1:])
            elif words[:3] == ["python", "-m", "grpo_exp"]:
                found.append(words[3:])
    return found


# The reader's own files the page's second block names: an open-r1 recipe, its accelerate config, a local copy of
# its model (config.json is all a plan reads).
MY_ACCELERATE = (
    "distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: 3}\nmixed_precision: bf16\nnum_processes: 8\n"
)
QWEN25_7B = (
    '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, '
    '"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, '
    '"max_position_embeddings": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}'
)


@pytest.mark.slow  # the real CLI in a subprocess, per command
def test_the_recipe_pages_commands_run_as_written(tmp_path):
    """docs/from-trl-and-open-r1.md's commands, typed in a reader's folder in the page's order: each import writes
    its experiment under ./conf, each plan (the local model copy's included) exits 0; the run line is planned
    (action=plan added), not trained."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "recipes").mkdir()
    shutil.copy(ROOT / "examples" / "recipes" / "open_r1_demo.yaml", tmp_path / "recipes" / "my_run.yaml")
    (tmp_path / "zero3.yaml").write_text(MY_ACCELERATE)
    (tmp_path / "models" / "my-copy").mkdir(parents=True)
    (tmp_path / "models" / "my-copy" / "config.json").write_text(QWEN25_7B)
    commands = recipe_page_commands()
    assert sum(args[0] == "recipe" for args in commands) == 2 and len(commands) >= 6, commands
    for i, args in enumerate(commands):
        planned = args if args[0] == "recipe" or "action=plan" in args else [*args, "action=plan"]
        extra = [] if args[0] == "recipe" else [f"hydra.run.dir={tmp_path / 'runs' / str(i)}"]
        result = subprocess.run(
            [sys.executable, "-m", "grpo_exp", *planned, *extra], cwd=tmp_path, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stdout + result.stderr)
    assert {p.name for p in (tmp_path / "conf" / "experiment").iterdir()} == {"mine.yaml", "my_run.yaml"}
    held = [
        n
        for plan in sorted((tmp_path / "runs").glob("*/plan.json"))
        for n in json.loads(plan.read_text())["notes"]
        if "topology.gpus_per_node=4 (experiment: 8)" in n
    ]
    assert len(held) == 1 and held[0].startswith("the command line holds over experiment my_run:"), held
