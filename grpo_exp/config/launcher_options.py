"""The launchers' options, read from the launchers themselves: each launcher package with options of its own holds a
config.py (grpo_exp/launching/launchers/<name>/config.py) with

    Config     a dataclass: launcher.<name>.* with its types and defaults (conf/launcher/<name>.yaml sets them)
    CHOICES    {field: the values it may take}, RANGES {field: (test, wanted)}: config/values.py checks them

The schema's `launcher` section is `name` and one such section per launcher, so adding a launcher is one folder and
one YAML. Only these config modules are imported here (each imports nothing but the config stage): a launcher's code
loads when a run chooses it (launching/launchers/__init__.py).
"""

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from types import ModuleType

# The launchers' package, by path: the config stage names no module of a later stage.
LAUNCHERS = Path(__file__).resolve().parents[1] / "launching" / "launchers"
PACKAGE = "grpo_exp.launching.launchers"


@cache
def modules() -> dict[str, ModuleType]:
    """{launcher name: its config module}, for each launcher that has options."""
    return {
        info.name: importlib.import_module(f"{PACKAGE}.{info.name}.config")
        for info in pkgutil.iter_modules([str(LAUNCHERS)])
        if info.ispkg and (LAUNCHERS / info.name / "config.py").exists()
    }


def choices() -> dict[str, tuple]:
    """{launcher.<name>.<field>: its values}, every launcher's."""
    return {
        f"launcher.{name}.{key}": values for name, module in modules().items() for key, values in module.CHOICES.items()
    }


def ranges() -> dict[str, tuple]:
    """{launcher.<name>.<field>: (test, wanted)}, every launcher's."""
    return {
        f"launcher.{name}.{key}": bound for name, module in modules().items() for key, bound in module.RANGES.items()
    }
