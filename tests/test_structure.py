"""The house's stages hold: every import of grpo_exp's own modules, at module level or inside a function, runs from a
stage into the same or an earlier one, none runs in a circle, and an import inside a function (to keep a start-up
cheap) says why. docs/architecture.md draws the stages; this test is what keeps them."""

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.helpers import REPO

# The stages, earliest first (docs/architecture.md): a module may import its own stage and the ones before.
STAGES = {
    "core": 0,
    "config": 1,
    "data": 1,  # loader components: the config's checks and the training processes read them
    "trackers": 1,  # tracker components: the config's checks name them, rank 0 starts them
    "models": 1,  # a model's numbers from config.json: the config's checks complete model=auto with them
    "recipe": 2,  # `grpo-exp recipe`: a TRL / open-r1 recipe as an experiment, composed with the config's schema
    "planning": 2,
    "launching": 3,
    "training": 4,
    "results": 4,
    "__main__": 5,
}
PLUGIN_STAGE = 4  # hydra_plugins/: the frontier sweeper plans and launches trials
INNER_IMPORTS_AT_MOST = 3  # issue 51: imports of grpo_exp's own modules inside functions, each with its reason


def modules() -> dict[str, Path]:
    found = {}
    for top in ("grpo_exp", "hydra_plugins"):
        for path in sorted((REPO / top).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def test_every_package_is_on_a_stage():
    """A new package is placed on a stage by hand (and drawn in docs/architecture.md), never the ground floor by
    default: the stage test then holds its imports like every other package's."""
    packages = {p.name for p in (REPO / "grpo_exp").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(STAGES), f"place {sorted(packages - set(STAGES))} in STAGES and docs/architecture.md"


def is_launcher_options(module: str) -> bool:
    """A launcher's config.py (grpo_exp.launching.launchers.<name>.config): the config stage builds the schema's
    `launcher` section from these (config/launcher_options.py), so they stand on the config stage."""
    parts = module.split(".")
    return parts[:3] == ["grpo_exp", "launching", "launchers"] and len(parts) == 5 and parts[4] == "config"


def stage(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] == "hydra_plugins":
        return PLUGIN_STAGE
    if parts[0] != "grpo_exp":
        return None
    if is_launcher_options(module):
        return STAGES["config"]
    return STAGES[parts[1]] if len(parts) > 1 else 0  # grpo_exp/__init__.py: shared constants


def own_imports(tree: ast.AST, module: str):
    """(imported module, line, inside a function) for every import of grpo_exp's own modules."""
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inner = {id(x) for f in functions for x in ast.walk(f) if isinstance(x, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            for name in [node.module, *names]:
                if name.startswith(("grpo_exp", "hydra_plugins")):
                    yield name, node.lineno, id(node) in inner
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(("grpo_exp", "hydra_plugins")):
                    yield alias.name, node.lineno, id(node) in inner


def known(name: str, every: dict) -> str | None:
    """The module an import names (`from grpo_exp.core import rundir` names grpo_exp.core.rundir)."""
    while name and name not in every:
        name = name.rpartition(".")[0]
    return name or None


def test_no_import_runs_against_the_stages():
    every = modules()
    against = []
    for module, path in every.items():
        for name, line, _ in own_imports(ast.parse(path.read_text()), module):
            target = known(name, every)
            if target and stage(target) > stage(module):
                against.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not against, against


def test_no_module_imports_in_a_circle():
    every = modules()
    graph = defaultdict(set)
    for module, path in every.items():
        for name, _, inside in own_imports(ast.parse(path.read_text()), module):
            target = known(name, every)
            if target and target != module and not inside:  # a package's own modules too (its __init__)
                graph[module].add(target)
    circles, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(trail[trail.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for module in sorted(every):
        if module not in state:
            visit(module, [module])
    assert not circles, circles


def test_imports_inside_functions_are_few_and_say_why():
    every, found = modules(), []
    for module, path in every.items():
        lines = path.read_text().splitlines()
        for _, line, inside in own_imports(ast.parse(path.read_text()), module):
            if inside and (path, line) not in {(p, n) for p, n, _ in found}:
                found.append((path, line, _says_why(lines, line - 1)))
    assert len(found) <= INNER_IMPORTS_AT_MOST, [f"{p.relative_to(REPO)}:{n}" for p, n, _ in found]
    unexplained = [f"{p.relative_to(REPO)}:{n}" for p, n, said in found if not said]
    assert not unexplained, f"an import inside a function says why on its line or the one before: {unexplained}"


def _says_why(lines: list[str], index: int) -> bool:
    """A comment on the import's line, or above the block of imports it is in."""
    if "#" in lines[index]:
        return True
    while index > 0 and lines[index - 1].strip().startswith(("from ", "import ")):
        index -= 1
        if "#" in lines[index]:
            return True
    return index > 0 and lines[index - 1].strip().startswith("#")


def test_training_imports_nothing_from_launching():
    every = modules()
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for module, path in every.items()
        if module.startswith("grpo_exp.training")
        for name, line, _ in own_imports(ast.parse(path.read_text()), module)
        if name.startswith("grpo_exp.launching")
    ]
    assert not found, found


def test_modules_and_functions_stay_readable_sizes():
    """No module over 400 lines, no function over 60 (the generated trl_schema.py aside)."""
    big, long = [], []
    for module, path in modules().items():
        if module.endswith("trl_schema"):
            continue
        text = path.read_text()
        if len(text.splitlines()) > 400:
            big.append(f"{path.relative_to(REPO)}: {len(text.splitlines())}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert not big and not long, (big, long)


def test_every_package_is_installed():
    """A wheel carries the packages pyproject.toml lists: a new subpackage missing there plans from the checkout and
    fails once installed (tests/test_install.py builds the wheel; this says which one at once)."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for top in ("grpo_exp", "hydra_plugins")
        for init in (REPO / top).rglob("__init__.py")
    }
    found.discard("hydra_plugins")  # a namespace: Hydra's plugins live below it
    assert found <= listed, sorted(found - listed)


def test_the_schema_loads_no_launcher_code():
    """config/launcher_options.py imports each launcher's config.py by name (the config stage cannot import the
    launching stage): importing the schema loads those and their packages' docstrings, and nothing that starts a
    process, plans, or talks to a scheduler."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, grpo_exp.config.schema; print(' '.join(sorted(sys.modules)))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    launching = {m for m in loaded if m.startswith("grpo_exp.launching")}
    assert launching and all(
        m in ("grpo_exp.launching", "grpo_exp.launching.launchers")
        or is_launcher_options(m)
        or (m.startswith("grpo_exp.launching.launchers.") and m.count(".") == 3)  # a launcher's package: its docstring
        for m in launching
    ), sorted(launching)
    assert not {m for m in loaded if m.startswith(("grpo_exp.planning", "submitit", "kubernetes"))}
    for init in (REPO / "grpo_exp" / "launching" / "launchers").glob("*/__init__.py"):
        body = ast.parse(init.read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{init}: a docstring only (config.py loads it)"


def test_mypy_checks_every_module_of_grpo_exp():
    """make lint's mypy covers all of grpo_exp/ and the frontier sweeper: no module is exempted from its errors, and
    the libraries it does not follow are the stack's, never grpo_exp's own."""
    import tomllib

    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(mypy["packages"]) == {"grpo_exp", "hydra_plugins.grpo_exp_frontier"}
    for override in mypy.get("overrides", []):
        assert not override.get("ignore_errors"), override["module"]
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        assert not [m for m in modules if m.startswith(("grpo_exp", "hydra_plugins"))], modules
