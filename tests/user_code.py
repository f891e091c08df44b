"""A user's reward function as people write them: it imports what it likes (tests/e2e/test_runs.py runs it inside
the shared two-rank run's workers). Each library below was once hidden from workers whose run did not use it
(`sys.modules[name] = None`, to start faster); user code must find every one."""

import importlib
import json
from pathlib import Path

LIBRARIES = ("peft", "deepspeed", "bitsandbytes", "wandb", "mlflow", "trackio", "swanlab")
REPORT = "user_code_imports.json"  # written in the worker's working directory (the driver's)


def imports_everything(completions, **kwargs) -> list[float]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = getattr(importlib.import_module(name), "__version__", "imported")
        except Exception as exc:  # the test names the library and the error
            found[name] = f"{type(exc).__name__}: {exc}"
    Path(REPORT).write_text(json.dumps(found))
    return [0.0] * len(completions)
