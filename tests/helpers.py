"""What tests share besides fixtures: composing a config as the driver does, the driver's own checks and
plan in-process, and the real CLI in a subprocess (only where the command line itself is what is tested).

    compose_cfg(*overrides)        the composed config `python -m grpo_exp <overrides>` would run
    report(*overrides)             (what the driver reports, the checked config): unknown keys, compose, checks
    planned(*overrides)            the driver's plan of a config that must pass every check: cfg, plan, memory
    run_job(*overrides, run_dir)   the driver's whole job in-process (launching/job.py), as Hydra would hand it
    run_driver / start_driver      `python -m grpo_exp` as a user runs it
    script(name)                   scripts/<name>.py, a checkout's tool, imported as a module
"""

import copy
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from grpo_exp.__main__ import register_plugins
from grpo_exp.config.registry import register_configs

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
FIXTURES = REPO / "tests" / "fixtures"  # small data files tests read
register_configs()


def script(name: str):
    """scripts/<name>.py imported as a module (the scripts are a checkout's tools, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


register_plugins()  # the frontier sweeper, as the command registers it


# make test runs one representative case of each exhaustive matrix and a third of the property tests' examples;
# make test-matrix (GRPO_EXP_MATRIX=1) runs every case and every example (docs/development.md).
FULL_MATRIX = os.environ.get("GRPO_EXP_MATRIX") == "1"


def _marked_beyond(cases: list, representative, mark) -> list:
    """pytest parameters (a tuple per case of several arguments, a value per case of one): the cases
    `representative(case)` keeps as they are, every other one carries `mark`. A table none of whose cases is kept
    is an error at collection: the lane it is marked out of would lose the test whole."""
    import pytest

    if not any(representative(case) for case in cases):
        raise ValueError(f"no representative case among {len(cases)}: the lane would lose the test whole")

    def marked(case):
        values = case if isinstance(case, tuple) else (case,)
        return pytest.param(*values, marks=mark)

    return [case if representative(case) else marked(case) for case in cases]


def matrix(cases: list, representative) -> list:
    """The cases `representative(case)` keeps run in make test; every other one is marked `matrix`, for make
    test-matrix."""
    import pytest

    return _marked_beyond(cases, representative, pytest.mark.matrix)


def fast_lane(cases: list, representative) -> list:
    """A table make test runs whole: the cases `representative(case)` keeps run in make test-fast too; every other
    one is marked `slow` (make test only), so the edit-test loop runs no exhaustive table."""
    import pytest

    return _marked_beyond(cases, representative, pytest.mark.slow)


def every(n: int, cases: list):
    """A `representative` for matrix() and fast_lane(): every n-th of `cases`, the first one included."""
    kept = cases[::n]
    return lambda case: case in kept


def examples(full: int) -> int:
    """A property test's example count: `full` in make test-matrix, a third of it (at least 5) in make test."""
    return full if FULL_MATRIX else max(full // 3, 5)


def group_options(group: str) -> list[str]:
    """The options a group ships (not the recipe tests' temporary experiments, `_test_*`, written while they run)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_test_"))


_COMPOSED: dict[tuple, DictConfig] = {}


def compose_cfg(*overrides: str, hydra_config: bool = False) -> DictConfig:
    """The config `python -m grpo_exp <overrides>` would run (with the `hydra` node if asked).

    Composed in Hydra's own two steps, the first one cached: the defaults list (groups, experiments, hydra's own
    and anything Hydra refuses at parse time) is composed once per test process and handed out as a copy, then the
    key=value overrides are applied to it by the function Hydra applies them with, in order, in struct mode. A
    compose costs ~0.11 s on 2 cores and the fast lane asks for some 500 distinct ones; most differ only in their
    values (tests/test_helpers.py holds the two steps equal to one compose). Configs from a search path outside
    conf/ (a test's own files) are composed whole, anew."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import OmegaConfBaseException

    from grpo_exp.config import overrides as parsing

    if not GlobalHydra.instance().is_initialized():
        initialize_config_dir(str(CONF), version_base="1.3")
    whole = parsing.whole_mappings(list(overrides))  # 'data.rewards={...}': set after composing, as the CLI does
    given = [o for o in overrides if o not in whole]
    if any("searchpath" in o for o in given):
        cfg = compose("config", overrides=given, return_hydra_config=hydra_config)
        parsing.set_whole(cfg, whole.values())
        return cfg
    parsed = {o: next(iter(parsing.parse([o])), None) for o in given}  # None: Hydra refuses it while composing
    applied = [  # what Hydra applies to the composed config (a sweep in a single run is refused while composing)
        o
        for o in given
        if not hydra_config and parsed[o] and parsing.is_config_key(parsed[o]) and not parsed[o].is_sweep_override()
    ]
    key = (tuple(o for o in given if o not in applied), hydra_config)
    if key not in _COMPOSED:
        _COMPOSED[key] = compose("config", overrides=list(key[0]), return_hydra_config=hydra_config)
    cfg = copy.deepcopy(_COMPOSED[key])
    try:
        ConfigLoaderImpl._apply_overrides_to_config([parsed[o] for o in applied], cfg)
    except OmegaConfBaseException as exc:  # as Hydra's load_configuration wraps it
        raise ConfigCompositionException() from exc
    parsing.set_whole(cfg, whole.values())
    return cfg


def report(*items: str, gpus: int = 0) -> tuple[str, DictConfig | None]:
    """What the driver reports for these command-line overrides, in-process, and the checked config (None
    when it did not compose): the pre-scan of unknown keys, composing, finalize, then the staged checks."""
    text, cfg, _ = _checked(*items, gpus=gpus)
    return text, cfg


def _checked(*items: str, gpus: int = 0):
    """report()'s text and config, and the launch plan the checks made (None where a stage stopped them)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from grpo_exp.__main__ import deepspeed_override
    from grpo_exp.config import errors, overrides
    from grpo_exp.launching import job

    items = [deepspeed_override(i) for i in items]
    unknown = overrides.unknown(items)
    found = [str(p) for p in unknown.values()]
    try:
        cfg = compose_cfg(*[i for i in items if i not in unknown])
    except (HydraException, OmegaConfBaseException, ValueError, OverflowError) as exc:
        return "\n".join([*found, errors.explain(exc)]), None, None
    plan, problems = None, job.finalize(cfg, set(overrides.values(items)))
    if not problems:
        plan, problems = job.check(cfg, Path("/nonexistent-run-dir"), gpus=gpus)
    return "\n".join(found + [str(p) for p in problems]), cfg, plan


def problems(*overrides: str, gpus: int = 0) -> list:
    """The driver's problems with `overrides` (composed as the CLI composes them), stage by stage."""
    from grpo_exp.__main__ import deepspeed_override

    cfg = compose_cfg(*map(deepspeed_override, overrides))  # as the CLI rewrites deepspeed.<key>=v
    return check(cfg, gpus=gpus)[1]


def problem_keys(found) -> list[str]:
    return [p.key for p in found]


@dataclass
class Planned:
    cfg: DictConfig
    plan: object  # placement.Plan
    memory: object  # planner.MemoryPlan: to_dict() is the memory part of plan.json

    @property
    def inputs(self):
        from grpo_exp.planning import inputs

        return inputs.inputs(self.cfg, self.plan)


def planned(*overrides: str, gpus: int = 0) -> Planned:
    """The driver's plan of `overrides` (action=plan), which must pass every check."""
    from grpo_exp.planning import planner

    text, cfg, plan = _checked("action=plan", *overrides, gpus=gpus)
    assert text == "", text
    return Planned(cfg, plan, planner.memory_plan(cfg, plan))


def run_job(*overrides: str, run_dir: Path, gpus: int = 0, sweeping: bool = False):
    """The driver's whole job (launching/job.py) in-process for these overrides, as Hydra hands it over:
    its Ended (exit code, run dir, summary)."""
    from grpo_exp.__main__ import deepspeed_override
    from grpo_exp.config import overrides as cli_overrides
    from grpo_exp.launching import job

    items = [deepspeed_override(i) for i in overrides]
    unknown = cli_overrides.unknown(items)
    cfg = compose_cfg(*[i for i in items if i not in unknown])
    spec = job.Job(
        cfg,
        Path(run_dir),
        sweeping=sweeping,
        explicit=set(cli_overrides.values(items)),
        unknown=list(unknown.values()),
        overrides=items,
        gpus=gpus,
    )
    return job.run(spec)


def run_fresh(body: str) -> None:
    """Run a VmHWM test in a fresh process: after other tests (the planner-fidelity ones build GB-sized
    models) freed but still-resident heap absorbs a spike of tens of MiB without raising the RSS peak."""
    import subprocess
    import sys
    import textwrap

    prelude = """
import torch
from grpo_exp.training import phases, probes
MIB = 2**20
if not probes.MemoryProbe().host_peak_resettable:
    raise SystemExit(77)
"""
    result = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(body)], capture_output=True, text=True)
    if result.returncode == 77:
        import pytest

        pytest.skip("this kernel/sandbox does not allow resetting VmHWM")
    assert result.returncode == 0, result.stderr[-2000:]


@functools.cache
def slurm_problem() -> str | None:
    """Why no real SLURM cluster answers here, or None: asked when a test runs, once per process (sinfo waits
    ~9 s for a controller that is not there)."""
    if shutil.which("sbatch") is None:
        return "no sbatch on PATH (sudo bash scripts/slurm_local.sh sets up a two-node cluster)"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout.split()
    except (subprocess.SubprocessError, OSError) as exc:
        return f"sinfo failed: {exc}"
    if not any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in states):
        return f"no SLURM node is up (sinfo: {states or 'nothing'}); sudo bash scripts/slurm_local.sh starts them"
    return None


def driver_env(model_cache: Path, **extra: str) -> dict[str, str]:
    """The environment every test's driver runs in: this checkout importable, the session's tiny-model
    cache, W&B quiet and never online (no API key unless a test passes one in `extra`)."""
    # this checkout first, then whatever PYTHONPATH already holds (a GPU kit's wheels: scripts/gpu_lane.sh)
    importable = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "GRPO_EXP_CACHE": str(model_cache), "PYTHONPATH": importable, "WANDB_SILENT": "true"}
    for name in ("WANDB_API_KEY", "PYTHONWARNINGS"):
        env.pop(name, None)
    return {**env, **extra}


def run_driver(cwd: Path, model_cache: Path, *args: str, env: dict | None = None, timeout: int = 600):
    """`python -m grpo_exp <args>` to its end, as a user runs it: the CompletedProcess (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "grpo_exp", *args],
        cwd=cwd,
        env=driver_env(model_cache, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_driver(
    cwd: Path, model_cache: Path, *args: str, env: dict | None = None, wrap: tuple = (), **popen
) -> subprocess.Popen:
    """`python -m grpo_exp <args>` in the background: the Popen, stdout and stderr merged into one text
    pipe unless `popen` says otherwise (a driver nobody reads for minutes needs DEVNULL: a full pipe blocks it).
    `wrap`: the command it runs under (a node's namespaces: tests/launching/test_two_nodes.py)."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, **popen}
    return subprocess.Popen(
        [*wrap, sys.executable, "-m", "grpo_exp", *args],
        cwd=cwd,
        env=driver_env(model_cache, **(env or {})),
        text=True,
        **popen,
    )


def kill_all(processes) -> None:
    """SIGKILL each of `processes` (Popen or psutil.Process) that is still there."""
    import psutil

    for proc in processes:
        try:
            proc.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass


# Runs several tests read (tests/conftest.py makes them once per session): the secrets in one run's
# environment, and the GRPOConfig fields beyond grpo_exp's YAML it sets.
MLFLOW_EXPERIMENT = "one_rank_run"  # where the shared one-process run logs on the session's MLflow server
SECRETS = {
    "WANDB_API_KEY": "marker-wandb-0f9e8d7c",
    "HF_TOKEN": "hf_marker_1a2b3c4d",
    "HUGGING_FACE_HUB_TOKEN": "hf_marker_5e6f7a8b",
    "MLFLOW_TRACKING_TOKEN": "mlflow_marker_9c8b7a6f",  # sent to the session's MLflow server, which ignores it
    "SWANLAB_API_KEY": "swanlab_marker_2d3e4f5a",  # logger.mode=offline: never sent
}
EXTRA_FIELDS = (
    "trainer.save_total_limit=2",
    "trainer.epsilon_high=0.28",
    "trainer.min_p=0.05",
    "trainer.beta=0.04",
    "trainer.sync_ref_model=true",
)


def check(cfg: DictConfig, run_dir: Path = Path("/nonexistent-run-dir"), gpus: int = 0, explicit=()):
    """The driver's finalize and checks of a composed `cfg`, in place: (launch plan or None, problems)."""
    from grpo_exp.launching import job

    problems = job.finalize(cfg, set(explicit))
    return (None, problems) if problems else job.check(cfg, run_dir, gpus)


def swanlab_records(folder):
    """Every record of the one SwanLab run below `folder`, read by SwanLab's own reader (the one `swanlab sync`
    replays)."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    [path] = folder.rglob("run-*.swanlab")
    reader = DataStoreReader()
    reader.open(path)
    records = []
    for data in iter(reader.scan, None):
        records.append(Record())
        records[-1].ParseFromString(data)
    reader.close()
    return records
