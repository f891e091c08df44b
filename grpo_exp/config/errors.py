"""Config errors as short messages: the full key, why, a fix. Never a traceback.

`Problem` is the one form every check reports in. Hydra rejects unknown group options, unknown
keys and wrong types while composing; `explain` rewrites its exceptions in the same form, with the
nearest valid names ("did you mean ...?") or the key that sets a field grpo_exp owns.
"""

import difflib
import re
import sys
from dataclasses import dataclass

from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from grpo_exp.config.schema import OWNED_TRAINER_FIELDS, Config


@dataclass(frozen=True)
class Problem:
    key: str  # full config key, e.g. trainer.num_generations
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.why}\n    fix: {self.fix}"


def report(message: str) -> None:
    print(f"grpo_exp: invalid config\n{message}", file=sys.stderr)


def valid_keys(parent: str) -> list[str]:
    """Keys the schema allows under `parent` ('' = root), or [] if it is not a schema node."""
    node = OmegaConf.structured(Config)
    if parent:
        node = OmegaConf.select(node, parent)
    return sorted(node.keys()) if OmegaConf.is_dict(node) else []


def explain(exc: HydraException | OmegaConfBaseException) -> str:
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, _, option = (exc.missing_cfg_file or "").rpartition("/")
        return f"{group}={option}: no such option\n    fix: use one of: {', '.join(sorted(exc.options))}"
    if isinstance(exc, OverrideParseException):
        return f"{exc.override}: not a valid override ({exc.message.splitlines()[0]})\n    fix: write key=value, group=option or +key=value"
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    key = getattr(cause, "full_key", None)
    if key and isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return str(unknown_key(key))
    if key and isinstance(cause, ValidationError):
        wanted = re.search(r"converted to (\w+)", cause.msg)
        kind = f"a {wanted.group(1)}" if wanted else "a value of its type"
        return f"{key}: {cause.msg.splitlines()[0]}\n    fix: {key} takes {kind}; `python -m grpo_exp --cfg job` shows every value"
    return str(exc).strip()


def unknown_key(key: str) -> Problem:
    """`key` is not in the schema: name the key that sets it if grpo_exp owns it, else the nearest valid names."""
    parent, _, name = key.rpartition(".")
    field_name = name if parent == "trainer" else f"vllm_{name}"
    if parent in ("trainer", "vllm") and field_name in OWNED_TRAINER_FIELDS:
        return Problem(key, f"grpo_exp sets GRPOConfig's `{field_name}` itself", f"use {OWNED_TRAINER_FIELDS[field_name]}")
    if parent == "trainer" and name.startswith("vllm_"):
        return Problem(key, "vLLM settings live in the vllm group, without the vllm_ prefix", f"use vllm.{name.removeprefix('vllm_')}")
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
