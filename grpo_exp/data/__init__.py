"""Data loaders as components: `data.loader` is `{_target_: <a function>, **kwargs}`, as a reward is. The function
is called with the keyword arguments it takes of `data` (the data config) and `seed`, and the mapping's own, and
returns a `datasets.Dataset` (None: the environment gives every prompt). Its rows then become TRL's: columns
renamed, prompts formatted, long prompts dropped (training/data.py).

A shipped loader is a module of this package that holds everything about it: `load(data, seed)` and
`scan(data) -> (columns, rows, where)` (what a check before launch can know without `datasets`; None: unknown), and
where it applies, `prompts(data, seed)` (every prompt, before launch: the plan counts their tokens), READS_PATH (it
reads data.path), PROMPTS_FROM_ENVIRONMENT (data=none), SPLITS = False (no data.eval_split). Adding one is a module
here and a conf/data/<name>.yaml naming its `load`.

A user's loader (`data.loader._target_=my_pkg.load`) gets the same checks before launch: it is called once here
(its dataset cached for the process) and its columns, rows and prompts checked as a shipped loader's are.
"""

import importlib
import inspect
import json
import sys
from typing import TYPE_CHECKING, Any, Protocol, cast

from omegaconf import DictConfig

from grpo_exp import Problem, import_failure, locate
from grpo_exp.core import plain


class Loader(Protocol):
    """A shipped loader as this module calls it: a module of this package. Where it applies it also has
    `prompts(data, seed)`, READS_PATH, PROMPTS_FROM_ENVIRONMENT or SPLITS (read with their defaults when absent). A
    user's loader is a function instead, called with the keywords it takes (load)."""

    def load(self, data: DictConfig, seed: int) -> Any:
        """A `datasets.Dataset`, or None where the environment gives every prompt."""

    def scan(self, data: DictConfig) -> tuple[set[str] | None, int | None, str] | list[Problem]:
        """(columns, rows, where) before launch, without `datasets` (None: not known here), or what stops reading it."""


if TYPE_CHECKING:  # mypy holds each shipped loader to the protocol (at run time each is imported when named)
    from grpo_exp.data import files, gsm8k, none, toy_math

    _SHIPPED: tuple[Loader, ...] = (files, gsm8k, none, toy_math)

_LOADED: dict[str, object] = {}  # a user's loader's dataset, per loader and seed: called once a process


# A run dir frozen before loaders were components names its loader by a word (data.loader: toy_math): read it so.
_BY_WORD = {"toy_math": "toy_math", "gsm8k": "gsm8k", "hf": "files", "none": "none"}


def _mapping(data: DictConfig) -> dict:
    if isinstance(data.loader, str):
        return {"_target_": f"{__name__}.{_BY_WORD.get(data.loader, data.loader)}.load"}
    return plain.mapping(data.loader) if isinstance(data.loader, DictConfig) else {}


def target(data: DictConfig) -> str:
    return str(_mapping(data).get("_target_", ""))


def component(data: DictConfig) -> Loader | None:
    """The shipped loader's module (grpo_exp.data.<name>), or None for a user's own function."""
    module = target(data).rpartition(".")[0]
    if module.startswith(f"{__name__}."):
        return cast(Loader, sys.modules.get(module) or importlib.import_module(module))
    return None


def name(data: DictConfig) -> str:
    """What messages call the loader: the shipped module's name (toy_math), or the user's dotted path."""
    module = target(data).rpartition(".")[0]
    return module.rpartition(".")[2] if component(data) is not None else target(data)


def load(data: DictConfig, seed: int):
    """The loader's dataset (None: the environment gives the prompts)."""
    function = locate(target(data))
    if not callable(function):  # the checks before launch refused it; a caller that skipped them learns it here
        raise TypeError(f"data.loader._target_={target(data)!r} is not a function")
    kwargs = {k: v for k, v in _mapping(data).items() if k != "_target_"}
    parameters = inspect.signature(function).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    offered = {"data": data, "seed": seed}
    return function(**{k: v for k, v in offered.items() if takes_any or k in parameters}, **kwargs)


def reads_path(data: DictConfig) -> bool:
    found = component(data)
    return bool(getattr(found, "READS_PATH", False))


def prompts_from_environment(data: DictConfig) -> bool:
    return bool(getattr(component(data), "PROMPTS_FROM_ENVIRONMENT", False))


def has_splits(data: DictConfig) -> bool:
    found = component(data)
    return found is None or getattr(found, "SPLITS", True)


def scan(data: DictConfig) -> tuple[set[str] | None, int | None, str] | list[Problem]:
    """(columns, rows, where) of the data before launch (None: not known here), or the problems found reading it."""
    found = component(data)
    if found is not None:
        return found.scan(data)
    loaded = _user_dataset(data)
    if isinstance(loaded, list):
        return loaded
    return set(loaded.column_names), len(loaded), target(data)


def prompts(data: DictConfig, seed: int) -> list | None:
    """Every prompt of the data, where it is known before launch (a generated dataset, a user's loader), else None."""
    found = component(data)
    if found is not None:
        return found.prompts(data, seed) if hasattr(found, "prompts") else None
    loaded = _user_dataset(data, seed)
    if isinstance(loaded, list) or data.prompt_column not in loaded.column_names:
        return None
    return list(loaded[data.prompt_column])


def _user_dataset(data: DictConfig, seed: int = 0):
    """A user's loader called once (per process, loader and seed), or the problems that stop it."""
    key = json.dumps([_mapping(data), seed], sort_keys=True, default=str)
    if key not in _LOADED:
        _LOADED[key] = _call_user_loader(data, seed)
    return _LOADED[key]


def _call_user_loader(data: DictConfig, seed: int):
    dotted = target(data)
    if locate(dotted) is None:
        why = f"_target_ {dotted!r} does not import: {import_failure(dotted)}"
        return [Problem("data.loader", why, "point data.loader._target_ at a function of an importable module")]
    try:
        loaded = load(data, seed)
    except Exception as exc:  # the user's code: its own error, named, never a traceback
        return [Problem("data.loader", f"{dotted} raised {type(exc).__name__}: {exc}", "fix the loader")]
    if not hasattr(loaded, "column_names") or not hasattr(loaded, "__len__"):
        why = f"{dotted} returned {type(loaded).__name__}, not a datasets.Dataset"
        return [Problem("data.loader", why, "return datasets.Dataset.from_list(rows) (or any datasets.Dataset)")]
    return loaded
