"""Turning config errors into short messages: the key, why, the valid options. No traceback."""

import sys
from pathlib import Path


def report(message: str) -> None:
    print(f"grpo_exp: invalid config\n{message}", file=sys.stderr)


def explain(exc: BaseException, conf_dir: Path) -> str:
    return str(exc)
