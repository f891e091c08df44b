"""The benchmark scripts (benchmarks/, named in docs/development.md) import only what grpo_exp has: each
`from grpo_exp... import name`, inside functions too, names a module that exists and a name it defines. Read from
the sources, nothing imported: benchmarks/startup.py imported register_configs from config.schema long after it had
moved to config.registry, and nothing ran it to notice."""

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_structure import modules

SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))
SOURCES = modules()  # grpo_exp's module names -> their files


def _defined(source: Path) -> set[str]:
    """The names a module's top level binds: functions, classes, assignments and its own imports."""
    names = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


def _code_in_strings(tree: ast.AST) -> list[ast.AST]:
    """The Python a script runs from a string (plan_speed.py's COMPOSED_ONLY, given to `python -c`), parsed."""
    found = []
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if "grpo_exp" in text and "import" in text:
            try:
                found.append(ast.parse(text))
            except SyntaxError:  # prose that names an import, not code
                continue
    return found


def missing_imports(text: str) -> list[str]:
    """What the code `text` imports from grpo_exp that grpo_exp lacks, in code run from its strings too."""
    missing = []
    tree = ast.parse(text)
    for node in (n for root in (tree, *_code_in_strings(tree)) for n in ast.walk(root)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "grpo_exp":
            source = SOURCES.get(node.module)
            if source is None:
                missing.append(node.module)
                continue
            defined = _defined(source)
            missing += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if alias.name not in defined and f"{node.module}.{alias.name}" not in SOURCES
            ]
        elif isinstance(node, ast.Import):
            missing += [a.name for a in node.names if a.name.split(".")[0] == "grpo_exp" and a.name not in SOURCES]
    return missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_a_benchmark_imports_only_what_grpo_exp_has(script):
    assert not missing_imports(script.read_text()), f"{script.relative_to(REPO)} imports what grpo_exp lacks"


def test_the_check_finds_a_name_that_moved():
    assert missing_imports("def f():\n    from grpo_exp.config.schema import register_configs\n") == [
        "grpo_exp.config.schema.register_configs"
    ]
    assert missing_imports("from grpo_exp.config.registry import register_configs\nimport grpo_exp.nowhere\n") == [
        "grpo_exp.nowhere"
    ]
    # code a benchmark hands to `python -c`
    assert missing_imports('CODE = """from grpo_exp.launching.job import Gone\nrun()\n"""\n') == [
        "grpo_exp.launching.job.Gone"
    ]
