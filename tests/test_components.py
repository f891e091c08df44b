"""Components: a tracker or a data loader is a module and a YAML, a launcher a folder and a YAML, and nothing else
lists them. The shipped ones keep their protocol; a new tracker module or launcher folder, with its YAML, is chosen,
checked and run with no other file changed (the worked examples of docs/architecture.md)."""

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from grpo_exp import trackers
from grpo_exp.launching import launchers
from tests.helpers import CONF, REPO, compose_cfg, problems


def test_every_tracker_option_is_a_module_with_the_protocol():
    assert trackers.names() == sorted(p.stem for p in (CONF / "logger").glob("*.yaml") if p.stem != "none")
    for component in trackers.components():
        assert component.REPORT_TO == component.__name__.rpartition(".")[2]
        assert isinstance(component.PACKAGE, str) and hasattr(component.Tracker, "finish")


def test_every_launcher_option_is_a_package_with_the_protocol():
    assert launchers.names() == sorted(p.stem for p in (CONF / "launcher").glob("*.yaml"))
    for name in launchers.names():
        module = importlib.import_module(f"grpo_exp.launching.launchers.{name}.launcher")
        for hook in ("finalize", "check", "build", "write", "detaches", "run"):
            assert callable(getattr(module, hook)), (name, hook)
        assert isinstance(module.PICKS_PORTS_HERE, bool), name


TRACKER = """
REPORT_TO = "jsonl_demo"
PACKAGE = "json"  # the standard library: always installed
FINISHED = []


class Tracker:
    def __init__(self, cfg, run_dir):
        self.run_dir = run_dir

    def ready(self):
        pass

    def finish(self, summary, exit_code):
        FINISHED.append((summary.get("status"), exit_code))
"""


@pytest.fixture
def new_tracker(tmp_path, monkeypatch):
    """A tracker added as the docs say: one module in grpo_exp/trackers/ (here: a folder added to the package's
    path) and one conf/logger/<name>.yaml (here: on a search path)."""
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "jsonl_demo.py").write_text(TRACKER)
    monkeypatch.setattr(trackers, "__path__", [*trackers.__path__, str(tmp_path / "modules")])
    (tmp_path / "conf" / "logger").mkdir(parents=True)
    (tmp_path / "conf" / "logger" / "jsonl_demo.yaml").write_text("name: jsonl_demo\n")
    yield f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    sys.modules.pop("grpo_exp.trackers.jsonl_demo", None)


def test_a_new_tracker_is_one_module_and_one_yaml(new_tracker, tmp_path):
    assert "jsonl_demo" in trackers.names()
    cfg = compose_cfg(new_tracker, "logger=jsonl_demo")
    assert problems(new_tracker, "logger=jsonl_demo") == []
    assert problems(new_tracker, "logger=wandb", "logger.also=[jsonl_demo]") == []
    (tmp_path / "run").mkdir()
    started = trackers.start(cfg, tmp_path / "run")
    started.ready()
    started.finish({"status": "completed"}, 0)
    assert sys.modules["grpo_exp.trackers.jsonl_demo"].FINISHED == [("completed", 0)]


def test_a_name_no_tracker_module_has_is_refused():
    assert [p.key for p in problems("logger.name=jsonl_demo")] == ["logger.name"]


def test_the_shipped_data_options_name_loader_modules():
    for path in (CONF / "data").glob("*.yaml"):
        target = OmegaConf.load(path).loader._target_
        assert target.startswith("grpo_exp.data.") and target.endswith(".load"), path


LAUNCHER = """
from grpo_exp.launching.launchers.local.launcher import build, check, finalize, write  # this machine's checks

PICKS_PORTS_HERE = True
RAN = []


def detaches(cfg, sweeping, independent_trials):
    return False


def run(cfg, run_dir, plan, node):
    RAN.append(node.commands["train"])  # a launcher that records its command instead of starting it
    return 0
"""


def test_a_new_launcher_is_one_folder_and_one_yaml(tmp_path, monkeypatch):
    from grpo_exp.launching import job
    from tests.helpers import run_job

    (tmp_path / "modules" / "record_only").mkdir(parents=True)
    (tmp_path / "modules" / "record_only" / "__init__.py").write_text("")
    (tmp_path / "modules" / "record_only" / "launcher.py").write_text(LAUNCHER)
    monkeypatch.setattr(launchers, "__path__", [*launchers.__path__, str(tmp_path / "modules")])
    (tmp_path / "conf" / "launcher").mkdir(parents=True)
    (tmp_path / "conf" / "launcher" / "record_only.yaml").write_text("name: record_only\n")
    try:
        ended = run_job(
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
            "launcher=record_only",
            "logger=none",
            run_dir=tmp_path / "run",
        )
        assert isinstance(ended, job.Ended) and ended.code == 0 and ended.launched
        assert sys.modules["grpo_exp.launching.launchers.record_only.launcher"].RAN[0][-1].endswith("config.yaml")
    finally:
        for name in ("record_only.launcher", "record_only"):
            sys.modules.pop(f"grpo_exp.launching.launchers.{name}", None)


def test_a_users_own_tracker_is_named_by_target_and_built_with_its_keys(tmp_path):
    """logger._target_ on any logger option (none included): its other keys are the tracker's own, not unknown
    keys; rank 0's trackers build it with them, give it each step and the summary, then close it."""
    mine = ["logger=none", "++logger._target_=tests.user_tracker.JsonlTracker", f"++logger.path={tmp_path / 'rows'}"]
    assert problems(*mine) == []
    started = trackers.start(compose_cfg(*mine), tmp_path / "run")
    started.ready()
    started.log({"loss": 0.5, "memory/train/host_rss_max_gib": 1.0}, 1)
    started.finish({"global_step": 1, "status": "completed", "plan/peak/train_gib": 2.0}, 0)
    rows = [json.loads(line) for line in (tmp_path / "rows").read_text().splitlines()]
    assert rows == [
        {"step": 1, "loss": 0.5, "memory/train/host_rss_max_gib": 1.0},
        {"step": 1, "summary/global_step": 1.0, "summary/plan/peak/train_gib": 2.0, "summary/exit_code": 0},
        {"closed": True},
    ]


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("tests.user_tracker.Missing", "is not an importable class"),
        ("tests.user_tracker.NoClose", "has no close"),
    ],
)
def test_a_target_that_is_no_tracker_is_refused_by_its_key(target, why):
    [problem] = problems("logger=none", f"++logger._target_={target}")
    assert problem.key == "logger._target_" and why in problem.why


def test_a_key_beside_no_target_is_still_unknown():
    assert [p.key for p in problems("++logger.path=/tmp/x")] == ["logger.path"]


ECHO_CONFIG = """
from dataclasses import dataclass

from grpo_exp.config.bounds import at_least


@dataclass
class Config:
    greeting: str = "hello"  # what the launcher writes instead of starting anything
    times: int = 1


CHOICES = {"greeting": ("hello", "bonjour")}
RANGES = {"times": at_least(1, 10)}
"""

ECHO_LAUNCHER = """
from grpo_exp.launching.launchers.local.launcher import build, check, finalize, write  # this machine's checks

PICKS_PORTS_HERE = True


def detaches(cfg, sweeping, independent_trials):
    return False


def run(cfg, run_dir, plan, node):
    (run_dir / "echo.txt").write_text(" ".join([cfg.launcher.echo.greeting] * cfg.launcher.echo.times))
    return 0
"""


@pytest.mark.slow  # the CLI in a subprocess, from a copy of the checkout
def test_a_new_launcher_with_an_option_is_one_folder_and_one_yaml(tmp_path):
    """A launcher with options of its own, added as the docs say: grpo_exp/launching/launchers/echo/ (config.py,
    launcher.py) and conf/launcher/echo.yaml, in a copy of the checkout with nothing else changed. Its option is
    typed, its choices and ranges checked, and `launcher.echo.*` reaches its code."""
    copy = tmp_path / "checkout"
    for part in ("grpo_exp", "conf", "hydra_plugins"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    echo = copy / "grpo_exp" / "launching" / "launchers" / "echo"
    echo.mkdir()
    (echo / "__init__.py").write_text('"""launcher=echo: writes a greeting instead of starting anything."""\n')
    (echo / "config.py").write_text(ECHO_CONFIG)
    (echo / "launcher.py").write_text(ECHO_LAUNCHER)
    (copy / "conf" / "launcher" / "echo.yaml").write_text("name: echo\necho:\n  greeting: hello\n  times: 1\n")

    def run(*overrides, name):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "grpo_exp",
                "launcher=echo",
                "logger=none",
                "data.num_samples=8",
                f"hydra.run.dir={tmp_path / name}",
                *overrides,
            ],
            cwd=copy,
            env={**os.environ, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
        )

    done = run("launcher.echo.greeting=bonjour", "launcher.echo.times=2", name="ran")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "ran" / "echo.txt").read_text() == "bonjour bonjour"
    frozen = OmegaConf.load(tmp_path / "ran" / "config.yaml")
    assert frozen.launcher.name == "echo" and frozen.launcher.echo == {"greeting": "bonjour", "times": 2}
    refused = run("launcher.echo.greeting=hi", "launcher.echo.times=11", name="refused")
    assert refused.returncode == 2, refused.stderr[-3000:]
    said = refused.stdout + refused.stderr
    assert "launcher.echo.greeting" in said and "launcher.echo.times" in said and "Traceback" not in said
    wrong_type = run("launcher.echo.times=many", name="typed")
    assert wrong_type.returncode == 2 and "launcher.echo.times" in wrong_type.stdout + wrong_type.stderr
