"""Command-line overrides, read with Hydra's own parser.

Hydra stops composing at the first unknown key, so a recipe carried over with eight renamed keys
would be fixed one run at a time. `unknown` reads every override first: keys the schema does
not have are reported together (each with its home, config/keys.py) and left out of the
composition, so the rest of the config is still checked in the same report.
"""

import dataclasses
import functools
import sys
import typing

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from grpo_exp import CONF_DIR, Problem
from grpo_exp.config.errors import unknown_key
from grpo_exp.config.schema import Config, is_open_mapping

# Config groups selected with group=option: conf/'s directories (the `sweep` presets among them).
GROUPS = tuple(sorted(p.name for p in CONF_DIR.iterdir() if any(p.glob("*.yaml"))))


_parser: OverridesParser | None = None


@functools.cache  # a command line is read by several checks (unknown keys, whole mappings, the run dir): parsed once
def _parse_one(item: str) -> Override | None:
    global _parser
    _parser = _parser or OverridesParser.create()  # building Hydra's grammar once, not per override
    try:
        return _parser.parse_override(item)
    except HydraException:
        return None  # composing reports it


def parse(items: list[str]) -> list[Override]:
    """The overrides Hydra parses (one that does not parse is left to composing, which reports it)."""
    return [o for o in map(_parse_one, items) if o is not None]


def values(items: list[str]) -> dict[str, str]:
    """Overrides as {key or group: value text}, without Hydra's own (hydra.*) and deletions."""
    return {
        o.key_or_group: o.get_value_element_as_str()
        for o in parse(items)
        if not o.key_or_group.startswith("hydra") and not o.is_delete()
    }


def command_line(argv: list[str]) -> list[str]:
    """The overrides of a `python -m grpo_exp` command line (Hydra's own argument parser: flags such
    as --cfg job, -m or --config-dir are not overrides)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser().parse_known_args(argv)[0].overrides


# What can set `hydra.mode` (RUN or MULTIRUN) other than -m: a sweep preset, an experiment file, a
# user's own config dir or primary config, or the key itself.
_MODE_SETTERS = ("sweep", "experiment", "hydra.mode", "hydra.searchpath")
_CONFIG_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


def mode_needs_compose(argv: list[str]) -> bool:
    """Whether Hydra must compose the whole config to learn the run mode. Hydra always does, before
    composing it again to run (~0.35 s each on 2 cores); only a sweep preset, an experiment file, a
    user's own config dir or `hydra.mode` itself can make a command line without -m a multirun."""
    if any(arg.split("=")[0] in _CONFIG_FLAGS for arg in argv):
        return True
    keys = [o.key_or_group.lstrip("+~") for o in parse(command_line(argv))]
    return any(key.split(".")[0] in _MODE_SETTERS or key.startswith(_MODE_SETTERS) for key in keys)


def is_config_key(override: Override) -> bool:
    """Whether Hydra applies `override` to the composed config (key=value), not to the defaults list (a group, a
    group@package, hydra's own)."""
    key = override.key_or_group
    return not (key.startswith("hydra") or "/" in key or key in GROUPS or override.package)


def _allows(path: list[str], kind=Config) -> bool:
    """Whether the schema has the key `path` (a dict or untyped field accepts anything below it)."""
    if not path:
        return True
    if not dataclasses.is_dataclass(kind):
        return True  # Dict[str, Any] / Any: open
    hints = typing.get_type_hints(kind)
    if path[0] not in hints:  # a section with a _target_ (logger) takes its target's keys: checked once composed
        return "_target_" in hints
    child = hints[path[0]]
    if typing.get_origin(child) is typing.Union:  # Optional[X]
        child = next(a for a in typing.get_args(child) if a is not type(None))
    if typing.get_origin(child) in (list, dict) or child is typing.Any:
        return True
    return _allows(path[1:], child) if dataclasses.is_dataclass(child) else len(path) == 1


def whole_mappings(items: list[str]) -> dict[str, tuple[str, dict]]:
    """{override: (key, mapping)} for each `key={...}` on an open mapping of the schema. Hydra merges such a
    value into the option's mapping and refuses a new name in it (struct mode), so `'data.rewards={}'` would
    change nothing and `'env.factories={a: {...}}'` would fail: grpo_exp sets the mapping whole after composing
    instead (what the user wrote). `+key.name=...` still adds one entry, `key.name=null` removes one."""
    found = {}
    for item in items:
        override = _parse_one(item)
        if override is None or override.is_sweep_override() or override.is_delete() or override.is_add():
            continue
        value = override.value()
        if is_config_key(override) and isinstance(value, dict) and is_open_mapping(override.key_or_group):
            found[item] = (override.key_or_group, value)
    return found


def set_whole(cfg, mappings) -> None:
    """Set each (key, mapping) of whole_mappings in the composed `cfg`, replacing what the options gave it."""
    from omegaconf import OmegaConf, open_dict

    for key, mapping in mappings:
        with open_dict(cfg):
            OmegaConf.update(cfg, key, mapping, merge=False)


def unknown(items: list[str]) -> dict[str, Problem]:
    """{override: its Problem} for each override naming a key the schema lacks, no key, a group given
    no option name, or a number no float holds (which Hydra parses as an int)."""
    found = {}
    for item in items:
        override = _parse_one(item)
        if override is None:
            continue
        key = override.key_or_group
        if not key:
            found[item] = Problem(item, "names no key", "write key=value, group=option or +key=value")
        elif (
            key in GROUPS
            and not (override.is_delete() or override.is_sweep_override())
            and not isinstance(override.value(), (str, list))
        ):
            found[item] = Problem(
                key,
                f"needs an option name, not {override.value()!r}",
                f"write {key}=<option>; `python -m grpo_exp --help` lists them",
            )
        elif is_config_key(override) and not key.startswith("deepspeed.") and not _allows(key.split(".")):
            found[item] = unknown_key(key)
        elif _beyond_float(override):  # composing would raise a bare OverflowError that does not name the key
            found[item] = Problem(key, "is too large for a number", "give a value below 1e308")
    return found


def _beyond_float(override: Override) -> bool:
    if override.is_delete() or override.is_sweep_override():
        return False
    value = override.value()
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max


def chosen_groups(items: list[str]) -> dict[str, str]:
    """The groups the command line chose an option of (`topology=2x8`), group -> option."""
    return {
        o.key_or_group: str(o.value())
        for o in parse(items)
        if o.key_or_group in GROUPS and isinstance(o.value(), str) and not o.is_sweep_override()
    }


def hold_command_line(cfg, experiment: dict, chosen: dict[str, tuple[str, dict]], given: dict[str, str]) -> list[str]:
    """The command line wins over an experiment, whole. Hydra applies the experiment's values after the group options
    it composes, so a group option chosen again on the command line (`topology=1x8`) would keep the experiment's
    values for the keys that option sets: here the option's values are put back. A key given on the command line
    itself (`topology.gpus_per_node=12`, for this group or any other) is already Hydra's last word and is left as it
    is, whatever its order on the command line. `experiment`: its file's content; `chosen`: group -> (option name,
    that option's keys as flat dotted paths -> values); `given`: the command line's config keys -> their values
    (`given_keys`).

    Returns one note naming every value of the experiment the command line replaced ([] when none was)."""
    from omegaconf import OmegaConf

    set_by_experiment = {k: v for k, v in flat(experiment).items() if not k.startswith(("defaults", "hydra"))}
    replaced = []
    for key, value in sorted(set_by_experiment.items()):
        group = key.split(".", 1)[0]
        if key == "experiment":  # the run family's name, which experiment=<name> itself sets
            continue
        if key in given:
            if given[key] != value:
                replaced.append(f"{key}={given[key]} (experiment: {value})")
        elif group in chosen and key in chosen[group][1] and chosen[group][1][key] != value:
            option, held = chosen[group][0], chosen[group][1][key]
            OmegaConf.update(cfg, key, held, merge=False)
            replaced.append(f"{key}={held} from {group}={option} (experiment: {value})")
    if not replaced:
        return []
    name = experiment.get("experiment") or "the experiment"
    return [f"the command line holds over experiment {name}: " + "; ".join(replaced)]


def given_keys(items: list[str]) -> dict:
    """{key: value} of the overrides that set a key of the composed config (not a group's option, not Hydra's own)."""
    return {o.key_or_group: o.value() for o in parse(items) if is_config_key(o) and not o.is_delete()}


def flat(node, prefix: str = "") -> dict:
    """A nested mapping as dotted paths to its leaves (an empty mapping is a leaf)."""
    out = {}
    for key, value in (node or {}).items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
