"""Config errors as short messages: the full key, why, the valid options. Never a traceback.

Hydra rejects unknown group options, unknown keys and wrong types while composing; `explain`
rewrites its exceptions in the same form as validate.Problem, listing what would have been valid.
"""

import re
import sys

from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from grpo_exp.schema import Config


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
        parent, _, _ = key.rpartition(".")
        keys = valid_keys(parent)
        where = f"'{parent}'" if parent else "the root config"
        return f"{key}: unknown key in {where}\n    fix: use one of: {', '.join(keys)}"
    if key and isinstance(cause, ValidationError):
        wanted = re.search(r"converted to (\w+)", cause.msg)
        kind = f"a {wanted.group(1)}" if wanted else "a value of its type"
        return f"{key}: {cause.msg.splitlines()[0]}\n    fix: {key} takes {kind}; `python -m grpo_exp --cfg job` shows every value"
    return str(exc).strip()
