"""A tracker of a user's own, written as docs/trackers-and-report.md shows one: a class with log_dict and close, named
by `logger._target_` with its `path` beside it. The shared one-rank run (tests/conftest.py) trains with it; the
tests read its rows back (tests/e2e/test_trackers.py, tests/test_components.py)."""

import json


class JsonlTracker:
    def __init__(self, path: str, flush_every: int = 1):
        self.file = open(path, "a")  # noqa: SIM115 (open for the run: close() ends it)
        self.flush_every = flush_every

    def log_dict(self, metrics: dict, step: int) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.file.write(json.dumps({"step": step, **numbers}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.write(json.dumps({"closed": True}) + "\n")
        self.file.close()


class NoClose:
    def log_dict(self, metrics: dict, step: int) -> None:
        pass
