"""Writes grpo_exp/config/trl_schema.py: every field of the installed trl's GRPOConfig as typed dataclasses.

    python scripts/schema_gen.py            # rewrite grpo_exp/config/trl_schema.py from the installed trl
    python scripts/schema_gen.py --check    # exit 1 if the committed file differs (tests do this)

A checkout's tool, not the package's: it writes into the source tree, which an installed grpo_exp does not have.

Why generated and committed: the driver plans without importing trl (4-6 s), yet `trainer.*` must
accept every GRPOConfig field with TRL's own types and defaults. Mirroring 191 fields by hand
drifts; generating them once per trl upgrade and testing the file against the installed trl
keeps one source for every default (TRL's), and conf/trainer/grpo.yaml holds only grpo_exp's
deliberate differences.

Types are narrowed to what OmegaConf can check: `X | None` -> Optional[X]; enum-or-str -> str
(the enum's values go to CHOICES); dict-or-json-string -> Dict (Hydra writes dicts); other
unions -> Any.
"""

import argparse
import dataclasses
import enum
import sys
import types
import typing
from pathlib import Path

from grpo_exp.config.keys import ALIASES, OWNED_TRAINER_FIELDS

TARGET = Path(__file__).resolve().parents[1] / "grpo_exp" / "config" / "trl_schema.py"
VLLM_PREFIX = "vllm_"


def _is_union(tp) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _annotation(tp) -> tuple[str, tuple[str, ...] | str | None]:
    """(annotation source for OmegaConf, enum choices or "dict" for mappings, or None)."""
    optional = False
    args = [tp]
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
    choices = None
    enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
    if enums:  # SchedulerType | str: the enum names the valid strings
        choices = tuple(e.value for e in enums[0])
        args = [str]
    if any(typing.get_origin(a) is dict or a is dict for a in args):  # dict | str (a JSON string on TRL's CLI)
        # Any, not Optional[Dict]: OmegaConf cannot merge `key={a: 1}` into a None that is typed
        # as a dict; config/config_checks.py checks that the value is a mapping (DICT_FIELDS).
        return "Any", "dict"
    if len(args) == 1 and args[0] in (int, float, bool, str):
        text = args[0].__name__
    elif len(args) == 1 and typing.get_origin(args[0]) is list and typing.get_args(args[0])[0] in (int, float, str):
        text = f"List[{typing.get_args(args[0])[0].__name__}]"
    else:
        return "Any", choices
    return (f"Optional[{text}]" if optional else text), choices


def _default(f: dataclasses.Field) -> str:
    if _is_unset_alias(f.name):  # "not set": keys.resolve tells the alias apart from the name it stands for
        return "None"
    if f.default_factory is not dataclasses.MISSING:
        return f"field(default_factory=lambda: {f.default_factory()!r})"
    value = f.default.value if isinstance(f.default, enum.Enum) else f.default
    return repr(value)


def _is_unset_alias(name: str) -> bool:
    return any(
        key.split(".", 1)[1] in (name, name.removeprefix(VLLM_PREFIX)) and alias.unset is None
        for key, alias in ALIASES.items()
        if (key.startswith("vllm.") == name.startswith(VLLM_PREFIX))
    )


def _scheduler_kwargs() -> dict:
    """Per lr_scheduler_type, the keyword arguments its transformers function takes beyond what the
    Trainer passes (None: it takes **kwargs, e.g. torch's ReduceLROnPlateau)."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION

    passed = {"optimizer", "num_warmup_steps", "num_training_steps", "last_epoch"}
    out = {}
    for kind, function in TYPE_TO_SCHEDULER_FUNCTION.items():
        params = inspect.signature(function).parameters.values()
        takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
        out[kind.value] = None if takes_any else tuple(p.name for p in params if p.name not in passed)
    return out


def _help(f: dataclasses.Field) -> str:
    text = " ".join(str(f.metadata.get("help", "")).split())
    first = text.split(". ")[0].rstrip(".")
    return first if len(first) <= 110 else first[:107] + "..."


def render() -> str:
    import transformers
    import trl
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    trainer: list[str] = []
    vllm: list[str] = []
    choices: dict = {}
    dicts: list[str] = []
    for f in dataclasses.fields(GRPOConfig):
        if not f.init or f.name in OWNED_TRAINER_FIELDS:
            continue
        annotation, enum_choices = _annotation(hints[f.name])
        if _is_unset_alias(f.name) and not annotation.startswith(("Optional", "Any")):
            annotation = f"Optional[{annotation}]"
        is_vllm = f.name.startswith(VLLM_PREFIX)
        name = f.name.removeprefix(VLLM_PREFIX) if is_vllm else f.name
        line = f"    {name}: {annotation} = {_default(f)}"
        comment = _help(f)
        (vllm if is_vllm else trainer).append(f"{line}  # {comment}" if comment else line)
        key = f"{'vllm' if is_vllm else 'trainer'}.{name}"
        if enum_choices == "dict":
            dicts.append(key)
        elif enum_choices:
            choices[key] = enum_choices
        elif f.metadata.get("choices"):  # a str field whose argparse choices transformers lists (ddp_backend)
            choices[key] = tuple(f.metadata["choices"])
    choice_lines = "".join(f"    {k!r}: {v!r},\n" for k, v in sorted(choices.items()))
    scheduler_lines = "".join(f"    {k!r}: {v!r},\n" for k, v in _scheduler_kwargs().items())
    from transformers.debug_utils import DebugOption
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    body = "\n".join(trainer + vllm)
    typing_names = ", ".join(n for n in ("Any", "Dict", "List", "Optional") if f"{n}[" in body or f": {n} " in body)
    return (
        f'"""GENERATED by `python scripts/schema_gen.py` from trl {trl.__version__} (transformers '
        f"{transformers.__version__}). Do not edit.\n\n"
        "Every GRPOConfig field with TRL's default: `TrainerFields` (the `trainer` group, names verbatim) and\n"
        "`VllmFields` (the `vllm_*` fields, prefix dropped). Fields grpo_exp sets itself are left out:\n"
        'keys.OWNED_TRAINER_FIELDS names the key that sets each.\n"""\n\n'
        "from dataclasses import dataclass, field\n"
        f"from typing import {typing_names}\n\n"
        f"TRL_VERSION = {trl.__version__!r}\n\n"
        "# Fields typed by an enum in transformers, or given argparse choices: the only values GRPOConfig accepts.\n"
        f"CHOICES = {{\n{choice_lines}}}\n\n"
        "# Fields that take a mapping (TRL also accepts a JSON string on its own CLI; here YAML writes the dict).\n"
        f"DICT_FIELDS = {tuple(dicts)!r}\n\n"
        "# lr_scheduler_kwargs each scheduler takes (transformers.optimization; None: any, passed to torch).\n"
        f"SCHEDULER_KWARGS = {{\n{scheduler_lines}}}\n\n"
        "# trainer.debug: space-separated transformers DebugOption values.\n"
        f"DEBUG_OPTIONS = {tuple(d.value for d in DebugOption)!r}\n\n"
        "# model.model_type: the model types this transformers builds (a model with its own code needs\n"
        "# trust_remote_code).\n"
        f"MODEL_TYPES = {tuple(sorted(CONFIG_MAPPING_NAMES))!r}\n\n\n"
        "@dataclass\nclass TrainerFields:\n" + "\n".join(trainer) + "\n\n\n"
        "@dataclass\nclass VllmFields:\n" + "\n".join(vllm) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/schema_gen.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed file differs from the installed trl"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = TARGET.read_text() == text
        print(f"{TARGET} {'matches' if same else 'differs from'} the installed trl")
        return 0 if same else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
