"""grpo_exp: GRPO experiments on TRL + vLLM + DeepSpeed + PEFT from one Hydra config (README.md).

One command: `grpo-exp` (= `python -m grpo_exp`: a run) and its subcommands `grpo-exp compare | dashboard |
recipe | model-info | calibrate` (__main__.py); workers run `python -m grpo_exp.training.worker <run
dir>/config.yaml`.
The subpackages are the stages of a run, in order: config, planning, launching, training, results.

This module holds the few facts every stage shares; nothing here imports beyond the standard library.
"""

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _shipped(name: str) -> Path:
    """conf/: inside the installed package (a wheel ships it as grpo_exp/conf), else at the top of the repository
    (an editable checkout, the layout users know)."""
    here = Path(__file__).resolve().parent
    return here / name if (here / name).is_dir() else here.parent / name


# Hydra's primary config dir (the +sweep= presets are its sweep/ group); a user's own adds with --config-dir
CONF_DIR = _shipped("conf")

# The linear layers of a Llama/Qwen decoder layer: what peft's "all-linear" means there, and the adapters the
# planner proposes when it suggests peft=lora.
DECODER_LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

GIB = 2**30  # every memory figure grpo_exp reports is in GiB (2^30 bytes), named *_gib

# The phases of a GRPO step, in order. Telemetry measures each; the planner models generate,
# score, train and optimizer (reward functions, tool calls and environment resets of an agentic run, and
# the vLLM weight sync add no model memory). An episode's generation rounds count as generate.
PHASES = ("generate", "tools", "reward", "score", "train", "optimizer", "weight_sync")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run, in the form every check reports: the full config key, why, a fix."""

    key: str  # full config key, e.g. trainer.num_generations
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.why}\n    fix: {self.fix}"


def cache_root() -> Path:
    """Where grpo_exp keeps what it builds once: the tiny model, meta-device model facts, the schema's node, TRL's
    `vllm serve` argv. Safe to delete."""
    return Path(os.environ.get("GRPO_EXP_CACHE", Path.home() / ".cache" / "grpo_exp"))


def kept(path: Path, build: Callable[[], bytes], *, rebuild: bool = False) -> bytes:
    """The bytes kept at `path` (under cache_root(), named by what they are built from), else `build()` kept there.
    Written whole or not at all (a temporary file renamed into place: processes starting at once read a whole file);
    a cache that cannot be written never stops a run, it is built again next time."""
    if not rebuild and path.is_file():
        return path.read_bytes()
    built = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.urandom(6).hex()}.tmp")  # unique across processes, hosts and pods
        tmp.write_bytes(built)
        tmp.replace(path)
    except OSError:
        pass
    return built


@contextmanager
def imports_frozen() -> Iterator[None]:
    """Load modules with the garbage collector paused, then freeze what they made. Modules make objects that live as
    long as the process (Hydra, OmegaConf and our schema: ~60k; torch, transformers and trl: far more) and almost no
    garbage, yet the collector walks them again each time they have grown by a quarter: ~0.1 s of a plan (~0.8-1.2 s
    on 2 cores) and ~15% of a worker's imports (~2 s), paired in benchmarks/imports_frozen.py. Frozen, they are never
    walked again; the little garbage the imports left (~2% of the objects) is kept. A process that had the collector
    off keeps it off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def is_number(value) -> bool:
    """An int or a float (a bool is neither, though Python says it is an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_local_path(name_or_path: str) -> bool:
    """A model or dataset named by a path (one that exists, or one written as a path) rather than a
    hub id. A path that does not exist is then an error to report, not a hub lookup."""
    return Path(name_or_path).expanduser().exists() or name_or_path.startswith(("/", "./", "../", "~"))


def locate(dotted_path) -> object | None:
    """What a `_target_`-style dotted path (pkg.module.name) names, or None when it does not import: checks
    report that as a Problem (Hydra's get_method would also log an error line for it)."""
    import pydoc

    if not isinstance(dotted_path, str) or not dotted_path:
        return None
    try:
        return pydoc.locate(dotted_path)
    except pydoc.ErrorDuringImport:  # the module exists but raised while importing
        return None


def import_failure(dotted_path: str) -> str:
    """Why `dotted_path` does not import, in one line: the exception its module raised while importing (a missing
    dependency, a syntax error: the user's own cause, never swallowed), or the attribute its module lacks."""
    import importlib

    parts = str(dotted_path).split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
                continue  # this prefix is not a module: a shorter one may be, with the rest as attributes
            return f"{type(exc).__name__}: {exc}"  # a module that exists and imports something missing
        except Exception as exc:  # SyntaxError, or whatever the module raised at import
            return f"{type(exc).__name__}: {exc}".splitlines()[0]
        for name in parts[i:]:
            if not hasattr(found, name):
                return f"module '{found.__name__}' has no attribute '{name}'"
            found = getattr(found, name)
        return "it imports, but is not what is asked for here"
    return f"No module named '{parts[0]}'"


def visible_devices() -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of device ids (None when unset: every GPU is visible)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip() and d.strip() != "-1"]
