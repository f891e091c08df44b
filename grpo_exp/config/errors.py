"""Config errors as short messages: the full key, why, a fix. Never a traceback.

`Problem` (grpo_exp/__init__.py) is the one form every check reports in. Hydra rejects unknown group
options, unknown keys and wrong types while composing; `explain` rewrites its exceptions in the same
form, with the key's home when it is a name from TRL or open-r1 (config/keys.py), the key that sets a
field grpo_exp owns, or the nearest valid names ("did you mean ...?").
"""

import difflib
import re
import sys
from typing import cast

from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from grpo_exp import Problem
from grpo_exp.config import keys
from grpo_exp.config.keys import OWNED_TRAINER_FIELDS
from grpo_exp.config.schema import Config, is_open_mapping

__all__ = ["Problem", "report", "explain", "unknown_key", "did_you_mean"]


def report(message: str) -> None:
    print(f"grpo_exp: invalid config\n{message}", file=sys.stderr)


def valid_keys(parent: str) -> list[str]:
    """Keys the schema allows under `parent` ('' = root), or [] if it is not a schema node."""
    node = OmegaConf.structured(Config)
    if parent:
        node = OmegaConf.select(node, parent)
    return sorted(node.keys()) if OmegaConf.is_dict(node) else []


def explain(exc: Exception) -> str:
    """A compose-time exception (Hydra, OmegaConf, or the ValueError / OverflowError they let
    through for a null group option or a number no float holds) as key, why and fix."""
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, _, option = (exc.missing_cfg_file or "").rpartition("/")
        return f"{group}={option}: no such option\n    fix: use one of: {', '.join(sorted(exc.options))}"
    if isinstance(exc, OverrideParseException):
        why = exc.message.splitlines()[0]
        return f"{exc.override}: not a valid override ({why})\n    fix: write key=value, group=option or +key=value"
    # Hydra re-raises OmegaConf's error while composing a file (an experiment's value) without `from`: the
    # original, which names the key, is then the implicit context.
    cause = exc.__cause__ or (exc.__context__ if isinstance(exc.__context__, OmegaConfBaseException) else None) or exc
    # OmegaConf names the key in the message of errors it does not type
    named = re.search(r"full_key: (\S+)", str(cause))
    key = getattr(cause, "full_key", None) or (named.group(1) if named else None)
    if key and isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return str(unknown_key(key))
    if key and isinstance(cause, ValidationError):
        message = cause.msg or str(cause)
        wanted = re.search(r"converted to (\w+)", message)
        kind = f"a {wanted.group(1)}" if wanted else "a value of its type"
        why = message.splitlines()[0]
        return f"{key}: {why}\n    fix: {key} takes {kind}; `python -m grpo_exp --cfg job` shows every value"
    if isinstance(cause, OverflowError):
        why = str(cause).splitlines()[0]
        return f"{key or 'a value'}: is too large for a number ({why})\n    fix: give a value below 1e308"
    if isinstance(cause, ValueError) and "Config group override must be a string" in str(cause):
        why = str(cause).splitlines()[0]
        return (
            f"a group option: {why}\n    fix: write group=option (model=qwen7b); `python -m grpo_exp --help` lists them"
        )
    return str(exc).strip()


def as_problem(exc: OmegaConfBaseException) -> Problem:
    """An OmegaConf error met while reading the composed config (an interpolation that does not
    resolve, a value of the wrong type) as a Problem on its key."""
    named = re.search(r"full_key: (\S+)", str(exc))
    key = getattr(exc, "full_key", None) or (named.group(1) if named else "config")
    return Problem(key, str(exc).splitlines()[0], "fix that value; `python -m grpo_exp --cfg job` shows every value")


def unresolvable(cfg) -> list[Problem]:
    """Every value of `cfg` whose interpolation does not resolve (`${oc.env:X}` of an unset variable, a key
    that is not there), each named by its full key: OmegaConf's own error names none inside an untyped
    mapping (trainer.model_init_kwargs.<x>), so the tree is walked leaf by leaf."""
    from omegaconf import DictConfig, ListConfig

    problems = []

    def walk(node, prefix: str) -> None:
        keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
        for key in keys:
            full = f"{prefix}{key!s}"
            try:
                child = node[key]  # resolves this value (an interpolation to a mapping resolves to that mapping)
            except OmegaConfBaseException as exc:
                problems.append(
                    Problem(full, str(exc).splitlines()[0], f"give {full} a value, or set what its interpolation reads")
                )
                continue
            if isinstance(child, (DictConfig, ListConfig)):
                walk(child, f"{full}.")

    walk(cfg, "")
    return problems


def mistyped_interpolations(cfg) -> list[Problem]:
    """Values whose interpolation resolves to what the schema's type refuses (`peft.target_modules=${seed}`: an
    int for a list): the schema checks an interpolation's text when composing, never its value. Each resolved value
    is checked by the typed node that holds the interpolation in the composed config (an IntegerNode, a ListConfig
    of str), as composing would have checked it: no schema is built (a structured Config per plan took 5% of it).
    Each interpolation is resolved here once: one that does not resolve raises OmegaConf's error."""
    from omegaconf import DictConfig, ListConfig

    problems = []

    def walk(node, prefix: str) -> None:
        for key in node.keys() if isinstance(node, DictConfig) else range(len(node)):
            full = f"{prefix}{key!s}"
            child = node._get_node(key)
            if OmegaConf.is_interpolation(node, key):  # type: ignore[arg-type]  # a DictConfig's keys are its keys
                problems.extend(_typed(child, full, node[key]))
            elif isinstance(child, (DictConfig, ListConfig)):
                walk(child, f"{full}.")

    walk(cfg, "")
    return problems


def _typed(holder, key: str, value) -> list[Problem]:
    """`value` (resolved) checked by `holder`, the node of `key` whose type the schema set."""
    from omegaconf import DictConfig, ListConfig, ValueNode

    if is_open_mapping(key.rsplit(".", 1)[0]):
        return []  # a key of an open mapping: any value is its own
    plain = OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value
    meta = holder._metadata
    try:
        if isinstance(holder, ValueNode):
            holder.validate_and_convert(plain)
        elif isinstance(holder, ListConfig):
            ListConfig(cast(list, plain), element_type=meta.element_type, ref_type=meta.ref_type)
        elif meta.object_type not in (None, dict):  # a dataclass's section
            OmegaConf.merge(OmegaConf.structured(meta.object_type), plain)
        else:
            DictConfig(plain, key_type=meta.key_type, element_type=meta.element_type, ref_type=meta.ref_type)
    except (ValidationError, ConfigKeyError, ConfigAttributeError, ValueError) as exc:
        why = str(exc).splitlines()[0]
        return [Problem(key, f"is {plain!r} once its interpolation resolves: {why}", f"give {key} a value of its type")]
    return []


def unknown_key(key: str) -> Problem:
    """`key` is not in the schema: name the key that sets it if grpo_exp owns it, its home if it is a
    name from TRL's scripts, older TRL or open-r1, else the nearest valid names."""
    parent, _, name = key.rpartition(".")
    field_name = name if parent == "trainer" else f"vllm_{name}"
    if parent in ("trainer", "vllm") and field_name in OWNED_TRAINER_FIELDS:
        return Problem(
            key, f"grpo_exp sets GRPOConfig's `{field_name}` itself", f"use {OWNED_TRAINER_FIELDS[field_name]}"
        )
    found = keys.home(key)
    if found is not None and found.key is not None:
        note = f" ({found.note})" if found.note else ""
        return Problem(
            key,
            f"is not a grpo_exp key: it is a name from TRL's scripts, older TRL or open-r1{note}",
            f"use {found.key}",
        )
    if found is not None:
        return Problem(key, f"has no grpo_exp key: {found.note}", f"remove {key}")
    if parent == "trainer" and name.startswith("vllm_"):
        return Problem(
            key,
            "vLLM settings live in the vllm group, without the vllm_ prefix",
            f"use vllm.{name.removeprefix('vllm_')}",
        )
    if is_open_mapping(parent):  # Hydra's struct mode: a name new to the option's mapping needs a +
        return Problem(
            key,
            f"is a new name in '{parent}', and Hydra adds a name only with +",
            f"add it with +, e.g. +{key}._target_=pkg.module.Name, or give '{parent}' whole: "
            f"'{parent}={{{name}: {{_target_: pkg.module.Name}}}}'",
        )
    where = f"'{parent}'" if parent else "the root config"
    return Problem(key, f"unknown key in {where}", did_you_mean(name, valid_keys(parent), parent))


def did_you_mean(name: str, options: list[str], parent: str = "") -> str:
    """The closest valid names, or all of them when there are few."""
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(prefix + c for c in close)}?"
    if len(options) <= 25:
        return f"use one of: {', '.join(options)}"
    return f"no key is close; `python -m grpo_exp --cfg job` lists every key of {parent or 'the config'}"
