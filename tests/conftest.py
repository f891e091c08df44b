"""Fixtures (helpers.py holds the functions tests share): the session's tiny-model cache, the real runs
several tests read (made once per session, each on one xdist worker), the CLI in a temp dir, drivers in
the background, saved models of other families."""

import os
import subprocess
from pathlib import Path

import pytest

from grpo_exp import imports_frozen
from tests.helpers import EXTRA_FIELDS, MLFLOW_EXPERIMENT, SECRETS, compose_cfg, kill_all, run_driver, start_driver

if os.environ.get("PYTEST_XDIST_WORKER"):  # make test runs two workers on 2 cores: one torch thread each
    # (their training processes inherit it). Two processes with a thread per core each slow every op
    # several-fold: torch's threads wait at each op's end for the one the other process holds.
    os.environ["OMP_NUM_THREADS"] = "1"

# Session runs several tests read (below) and module-scoped runs: the tests that read one go to the
# same xdist worker (make test's --dist loadgroup), so each run is made once, not once per worker.
SHARED_RUNS = ("one_rank_run", "two_rank_run", "two_job_sweep", "stopped_run")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collection is mostly imports: loaded as the command loads its own (grpo_exp.imports_frozen)."""
    with imports_frozen():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        shared = [name for name in SHARED_RUNS if name in item.fixturenames]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _mark_groups_in_test_ids(items)


def _mark_groups_in_test_ids(items) -> None:
    """xdist's loadgroup scheduler reads a test's group from an `@<group>` suffix of its id, which
    xdist 3.8 writes into `item._nodeid`; pytest 9 builds the id from `item._id`, so the suffix never
    arrived and every group was scattered over the workers. Written where pytest 9 reads it."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


@pytest.fixture(scope="session")
def build():
    """grpo_exp.training.build, imported by the tests that call it: it imports TRL (~10 s on 2 cores), which a
    module-level import would charge every xdist worker at collection, whether or not it runs such a test."""
    with imports_frozen():  # as the worker loads it (grpo_exp.imports_frozen)
        from grpo_exp.training import build

    return build


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One tiny-model cache for the session (GRPO_EXP_CACHE), unless the caller set one. Shared by the
    xdist workers (beside their own temp dirs): each model is built once, the tool-calling one (~10 s of
    warm start) included; tiny.py's file lock makes a second worker wait for the first's build."""
    if os.environ.get("GRPO_EXP_CACHE"):
        return Path(os.environ["GRPO_EXP_CACHE"])
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "grpo_exp_cache"
    shared.mkdir(exist_ok=True)
    return shared


# --- runs many tests read ------------------------------------------------------------------------
# Each training run costs seconds of start-up (driver, worker imports, W&B); a run several tests
# can read is made once per session, on first use, and read-only after that.


def _shared_run(tmp_path_factory, model_cache, name: str, *args: str, env: dict | None = None, multirun=False):
    where = tmp_path_factory.mktemp(name)
    run_dir = where / "run"
    dir_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    result = run_driver(where, model_cache, *(["-m"] if multirun else []), *args, f"{dir_key}={run_dir}", env=env)
    return result, run_dir


@pytest.fixture(scope="session")
def two_rank_run(tmp_path_factory, model_cache):
    """A real 2-rank DDP run with W&B offline, a reference model (beta > 0: the score phase runs), a user's own two
    tools as TRL's docs write them (tests/user_code.py: the tools phase, TRL's tools/* metrics, the tiny model
    warm-started on their schemas), its rewards given whole ('data.rewards={...}': the option's are replaced) with
    one that imports every library workers once hid, and env.working_dir set, 2 steps: (CompletedProcess, run dir).
    test_runs (DDP over gloo, user code, the working dir), test_memory (per-phase peaks in every record),
    test_agentic (tool calls everywhere) and test_dashboard (panels, quiet console, run report) read it."""
    work = tmp_path_factory.mktemp("two_rank_work")
    return _shared_run(
        tmp_path_factory,
        model_cache,
        "two_rank",
        "logger.mode=offline",
        "trainer.max_steps=2",
        "trainer.beta=0.04",
        "env.tools=[tests.user_code.multiply,tests.user_code.async_add]",
        "trainer.max_tool_calling_iterations=2",
        "trainer.max_completion_length=96",  # a call, its result and the answer fit: TRL drops a result that does not
        "data.rewards={correctness: {_target_: grpo_exp.training.rewards.correctness}, "
        "user_imports: {_target_: tests.user_code.imports_everything}}",
        f"env.working_dir={work}",
    )


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` (SQLite store) on a free loopback port, for the session: its URL once /health
    answers; None where mlflow or tensorboard is not installed (the trackers' tests then skip, saying so)."""
    import importlib.util
    import signal
    import socket
    import sys
    import time
    import urllib.request

    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("tensorboard") is None:
        yield None
        return
    folder = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = f"sqlite:///{folder / 'mlflow.db'}"
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host", "127.0.0.1"]
        + ["--port", str(port), "--workers", "1"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, "mlflow server never answered /health"
                time.sleep(0.3)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # its store is the session's temp dir: nothing to flush
        server.wait(timeout=30)


@pytest.fixture(scope="session")
def trackio_dir(tmp_path_factory) -> Path | None:
    """trackio's local store for the session (TRACKIO_DIR), or None where trackio is not installed."""
    import importlib.util

    return tmp_path_factory.mktemp("trackio") if importlib.util.find_spec("trackio") is not None else None


@pytest.fixture(scope="session")
def one_rank_run(tmp_path_factory, model_cache, mlflow_server, trackio_dir):
    """A real 1-process run with W&B offline, GRPOConfig fields beyond grpo_exp's YAML (EXTRA_FIELDS)
    and secrets in its environment (SECRETS), 2 steps; beside W&B, MLflow (the session's real server),
    TensorBoard and trackio (a local store) where they are installed, and a user's tracker by _target_.
    test_e2e (one process), test_e2e_config (the fields reach GRPOConfig), test_nothing_lost (no secret in the
    run dir; the dir is one run's) and test_trackers read it."""
    import importlib.util

    also, env = [], dict(SECRETS)
    if mlflow_server is not None:
        also = ["mlflow", "tensorboard"]
        env |= {"MLFLOW_TRACKING_URI": mlflow_server, "MLFLOW_EXPERIMENT_NAME": MLFLOW_EXPERIMENT}
    if trackio_dir is not None:
        also.append("trackio")
        env["TRACKIO_DIR"] = str(trackio_dir)
    if importlib.util.find_spec("swanlab") is not None:
        also.append("swanlab")  # offline (logger.mode): <run dir>/swanlog
    trackers = [f"logger.also=[{','.join(also)}]"] if also else []
    # and a tracker of a user's own (tests/user_tracker.py), with a key of its own beside _target_
    mine = tmp_path_factory.mktemp("user_tracker") / "rows.jsonl"
    trackers += ["++logger._target_=tests.user_tracker.JsonlTracker", f"++logger.path={mine}"]
    return _shared_run(
        tmp_path_factory,
        model_cache,
        "one_rank",
        "topology.cpu_procs=1",
        "logger.mode=offline",
        "trainer.max_steps=2",
        *EXTRA_FIELDS,
        *trackers,
        env=env,
    )


@pytest.fixture(scope="session")
def two_job_sweep(tmp_path_factory, model_cache):
    """`-m env=none,number_game`: two 2-step jobs on the 2 CPU processes of make demo, with W&B offline (sweep
    dir): a plain run and an agentic one (the number game's environments, resets and get_reward). test_runs (a
    multirun runs every job), test_sweeps (one W&B group, swept values as keys) and test_agentic (the environment's
    episodes everywhere; compare's tool calls beside memory) read it. (Not under FSDP2: TRL's tool loop desyncs
    sharded ranks, which the config check refuses; FSDP2 has a run of its own in test_runs.)"""
    return _shared_run(
        tmp_path_factory,
        model_cache,
        "sweep",
        "trainer.max_steps=2",
        "env=none,number_game",
        multirun=True,
    )


@pytest.fixture
def cli(model_cache, tmp_path):
    """Run `python -m grpo_exp <overrides>` with its run dir in tmp_path; returns (result, run_dir)."""

    def run(*overrides: str, run_dir: Path | None = None, timeout: int = 600, multirun: bool = False):
        run_dir = run_dir or tmp_path / "run"
        where = [f"hydra.sweep.dir={run_dir}"] if multirun else [f"hydra.run.dir={run_dir}"]
        return run_driver(
            tmp_path, model_cache, *(["-m"] if multirun else []), *overrides, *where, timeout=timeout
        ), run_dir

    return run


@pytest.fixture
def background_driver(model_cache, tmp_path):
    """Start drivers in the background in tmp_path: background_driver(*args, env=..., **popen) -> Popen;
    whatever is still running at the end is killed, with its children."""
    import psutil

    started = []

    def start(*args: str, env: dict | None = None, **popen) -> subprocess.Popen:
        started.append(start_driver(tmp_path, model_cache, *args, env=env, **popen))
        return started[-1]

    yield start
    for driver in started:
        if driver.poll() is None:
            kill_all([driver, *psutil.Process(driver.pid).children(recursive=True)])


@pytest.fixture
def training_run(background_driver, tmp_path):
    """A 2-rank run that trains until stopped: yields (driver Popen, run dir, its processes) once
    the first step is logged; kills whatever is left at the end."""
    import time

    import psutil

    from grpo_exp.core import rundir

    run_dir = tmp_path / "run"
    driver = background_driver(
        "logger=none",
        "trainer.max_steps=10000",
        f"hydra.run.dir={run_dir}",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    while not rundir.read_metrics(run_dir) and time.time() < deadline:
        time.sleep(0.5)
    assert rundir.read_metrics(run_dir), "training never logged a step"
    processes = psutil.Process(driver.pid).children(recursive=True)
    yield driver, run_dir, processes
    kill_all(processes)


# Random-init models of other families, saved like any HF model (config.json, safetensors, the
# tiny model's tokenizer and chat template): what a user's own fine-tune directory looks like.
SAVED_ARCHITECTURES = {
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),
}


@pytest.fixture(scope="session")
def saved_models(tmp_path_factory, model_cache) -> dict[str, Path]:
    import torch
    import transformers
    from transformers import AutoTokenizer

    os.environ.setdefault("GRPO_EXP_CACHE", str(model_cache))
    from grpo_exp.training import build

    tokenizer = AutoTokenizer.from_pretrained(build.model_path(compose_cfg()))
    root = tmp_path_factory.mktemp("saved_models")
    out = {}
    for name, (config_cls, model_cls, extra) in SAVED_ARCHITECTURES.items():
        config = getattr(transformers, config_cls)(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=512,
            tie_word_embeddings=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=None,
            **extra,
        )
        torch.manual_seed(0)
        getattr(transformers, model_cls)(config).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        out[name] = root / name
    return out
