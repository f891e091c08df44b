"""What an import writes: the experiment (group choices, values with their sources, what was left out and
why), its YAML, and the proof that it composes as `experiment=<name>` will."""

import datetime
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grpo_exp import CONF_DIR, Problem
from grpo_exp.config import errors
from grpo_exp.config.registry import register_configs
from grpo_exp.config.rewards import active_rewards


class RecipeError(ValueError):
    pass


@dataclass
class Experiment:
    """What the import writes: group choices, values (each with its source), what was left out, and
    how the launch was read."""

    name: str
    groups: dict[str, str] = field(default_factory=dict)
    values: dict[str, tuple[object, str]] = field(default_factory=dict)  # key -> (value, source comment)
    origin: dict[str, str] = field(default_factory=dict)  # key or group -> the recipe field it came from
    no_home: dict[str, str] = field(default_factory=dict)  # source field -> why
    skipped: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)  # source field -> why it changes nothing
    notes: list[str] = field(default_factory=list)  # how the launch and old TRL forms were read
    later: dict = field(default_factory=dict)  # fields read once the whole recipe and launch are (fields.LATER)
    skip: set[str] = field(default_factory=set)  # what --skip names: fields, and reward names of reward_funcs

    def set(self, key: str, value, source: str, origin: str | None = None, interpolate: bool = False) -> None:
        """`value` at `key`; a recipe's text is literal (TRL never interpolates `${...}`), unless this
        importer wrote the interpolation itself (`interpolate`)."""
        self.values[key] = (value if interpolate else literal(value), source)
        self.origin[key] = origin or re.split(r"[ :]", source, maxsplit=1)[0]

    def choose(self, group: str, option: str, origin: str, replace: bool = True) -> None:
        if replace or group not in self.groups:
            self.groups[group] = option
            self.origin[f"/{group}"] = origin

    def lack(self, source: str, why: str) -> None:
        self.no_home[source] = why

    def ignore(self, source: str, value, why: str) -> None:
        self.ignored[source] = f"{inline(value)}: {why}"

    def drop(self, origin: str) -> None:
        """Forget every value and group choice a recipe field made (it is refused or skipped)."""
        for key in [k for k, o in self.origin.items() if o == origin]:
            self.values.pop(key, None)
            self.groups.pop(key.removeprefix("/"), None) if key.startswith("/") else None
            del self.origin[key]


def load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise RecipeError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: not a mapping of fields")
    return data


def _nest(values: dict[str, tuple[object, str]]) -> dict:
    tree: dict = {}
    for key, (value, source) in values.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = (value, source)
    return tree


def plain(value):
    """A recipe value as TRL's parser would take its text: YAML 1.1 reads an unquoted 2025-01-31 as a date."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def literal(value):
    """`value` with every `${` in its text escaped, so OmegaConf keeps it as written."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, list):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    return value


def inline(value) -> str:
    """`value` on one line of plain ASCII, for a comment (YAML ends a comment at any line break)."""
    return json.dumps(value, default=str)


def _scalar(value) -> str:
    if isinstance(value, str) and ("\n" in value or "'" in value):  # a Jinja chat template: readable as written
        return json.dumps(value, ensure_ascii=False)  # a YAML double-quoted scalar
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _emit(tree: dict, indent: int = 0) -> list[str]:
    lines = []
    pad = "  " * indent
    for key, item in tree.items():
        if isinstance(item, dict):
            lines.append(f"{pad}{key}:")
            lines += _emit(item, indent + 1)
        else:
            value, source = item
            lines.append(f"{pad}{key}: {_scalar(value)}  # {source}")
    return lines


def render(exp: Experiment, sources: list[str]) -> str:
    head = [
        "# @package _global_",
        f"# Imported by `grpo-exp recipe` from {', '.join(sources)}.",
        f"#   python -m grpo_exp experiment={exp.name} action=plan     # its plan",
        f"#   python -m grpo_exp experiment={exp.name}                 # run it (any key can still be overridden)",
        "# Each value names the recipe field it came from.",
        *[f"# {note}" for note in exp.notes],
        *(["defaults:"] if exp.groups else []),  # an empty `defaults:` is null, which Hydra refuses
        # quoted: YAML reads an unquoted `off` as false, which Hydra refuses as a group option
        *[f"  - override /{group}: {_scalar(option)}" for group, option in sorted(exp.groups.items())],
        "",
        f"experiment: {exp.name}",
    ]
    body = _emit(_nest(exp.values))
    tail = [f"# ignored (no effect on the run): {inline(source)[1:-1]}: {why}" for source, why in exp.ignored.items()]
    tail += [f"# skipped (--skip): {inline(source)[1:-1]}: {why}" for source, why in exp.skipped.items()]
    return "\n".join(head + body + tail) + "\n"


def compose_problems(exp: Experiment, sources: list[str]) -> list[Problem]:
    """Compose the experiment as `experiment=<name>` will, from a scratch config dir: Hydra's first
    complaint each time, until it composes (at most one round per value). Each complaint's value is taken
    out and its recipe field refused, so that one import reports every field that does not fit."""

    problems: list = []
    for _ in range(len(exp.values) + len(exp.groups) + 1):
        try:
            cfg = _compose(exp, sources)
            return problems + _weights_problems(exp, cfg)
        except Exception as exc:  # Hydra's and OmegaConf's errors, and the ValueErrors they let through
            text = errors.explain(exc)
        key = text.split(":", 1)[0].split("=", 1)[0].strip()
        origin = exp.origin.get(key) or exp.origin.get(f"/{key}")
        if origin is None:  # not traceable to one field: refuse the whole import with Hydra's reason
            return [*problems, Problem("the experiment", text.splitlines()[0], "fix the recipe, or --skip a field")]
        value = exp.values.get(key, (exp.groups.get(key),))[0]
        problems.append(
            Problem(origin, f"{value!r} at {key}: {text.splitlines()[0].split(': ', 1)[-1]}", f"--skip {origin}")
        )
        exp.drop(origin)
    return problems


def _weights_problems(exp: Experiment, cfg) -> list[Problem]:
    """One reward weight per reward the experiment keeps, or the config check would refuse every run of it."""

    weights, kept = cfg.trainer.reward_weights, list(active_rewards(cfg.data))
    refused_rewards = any(source.startswith("reward_funcs") for source in exp.no_home)  # their fix reconciles
    if weights is None or len(weights) == len(kept) or refused_rewards:
        return []
    exp.drop(exp.origin.get("trainer.reward_weights", "reward_weights"))
    return [
        Problem(
            "reward_weights",
            f"{len(weights)} weights for the {len(kept)} rewards the experiment keeps ({', '.join(kept)})",
            "--skip reward_weights (each reward then weighs 1.0), or list the recipe's rewards in reward_funcs",
        )
    ]


def _compose(exp: Experiment, sources: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    # A caller's own Hydra (a test's, or a program's that imports the recipe) is set aside, not deep-copied as
    # hydra.initialize's backup does (~70 ms of a composed repository), and handed back after.
    outer = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        with tempfile.TemporaryDirectory() as scratch, initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            Path(scratch, "experiment").mkdir()
            Path(scratch, "experiment", f"{exp.name}.yaml").write_text(render(exp, sources))
            return compose("config", overrides=[f"experiment={exp.name}", f"hydra.searchpath=[file://{scratch}]"])
    finally:
        GlobalHydra.instance().clear()
        if outer is not None:
            GlobalHydra.instance().initialize(outer)


def is_text(value) -> bool:
    return isinstance(value, str) and value.strip() != ""
