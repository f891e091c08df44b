"""Installable like any tool: a wheel (not an editable checkout) carries conf/ (the sweep presets in it), plans from
another directory, takes a user's own config dir (--config-dir) beside its own options, and trains the demo."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import REPO


@pytest.mark.slow
def test_a_wheel_plans_from_any_directory_with_a_users_config_dir(tmp_path):
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "whl"),
            str(REPO),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "whl").glob("grpo_exp-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert (
        "grpo_exp/conf/config.yaml" in names
        and "grpo_exp/conf/sweep/frontier.yaml" in names
        and "grpo_exp/core/rundir.py" in names
    )
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    (tmp_path / "mine" / "model").mkdir(parents=True)
    qwen7b = (REPO / "conf" / "model" / "qwen7b.yaml").read_text()
    (tmp_path / "mine" / "model" / "my_model.yaml").write_text(qwen7b.replace("name: qwen7b", "name: my-model"))
    (tmp_path / "elsewhere").mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site"), "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}

    def plan(*args):
        return subprocess.run(
            [sys.executable, "-m", "grpo_exp", *args, "action=plan"],
            cwd=tmp_path / "elsewhere",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    found = subprocess.run(
        [sys.executable, "-c", "import grpo_exp; print(grpo_exp.CONF_DIR)"],
        cwd=tmp_path / "elsewhere",
        env=env,
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == str(tmp_path / "site" / "grpo_exp" / "conf")  # the wheel's, not the checkout's
    shipped = plan("model=qwen7b", "topology=2x8", "vllm=server", f"hydra.run.dir={tmp_path / 'w1'}")
    assert shipped.returncode == 0 and (tmp_path / "w1" / "plan.json").is_file(), shipped.stderr[-2000:]
    own = plan(
        "--config-dir", str(tmp_path / "mine"), "model=my_model", "topology=1x8", f"hydra.run.dir={tmp_path / 'w2'}"
    )
    assert own.returncode == 0 and "my-model" in (tmp_path / "w2" / "config.yaml").read_text(), own.stderr[-2000:]
    # the demo itself, trained from the installed wheel (a step, one process: what `pip install .` gives a user)
    demo = subprocess.run(
        [sys.executable, "-m", "grpo_exp", "trainer.max_steps=1", "topology.cpu_procs=1", "logger=none"]
        + [f"hydra.run.dir={tmp_path / 'demo'}"],
        cwd=tmp_path / "elsewhere",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert '"status": "completed"' in (tmp_path / "demo" / "summary.json").read_text()


@pytest.mark.slow  # the CLI in subprocesses (~2.5 s): make test
def test_the_frontier_sweeper_needs_no_scan_of_the_hydra_plugins_namespace(tmp_path):
    """Hydra 1.3 finds plugins by scanning the hydra_plugins namespace, which setuptools' editable installs hide
    (hydra#2359). grpo_exp registers its sweeper itself: with the scan seeing none of hydra_plugins, the frontier
    still plans."""
    blind_scan = (
        "import sys\n"
        "from hydra.core.plugins import Plugins\n"
        "scan = Plugins._scan_all_plugins\n"
        "Plugins._scan_all_plugins = staticmethod(\n"
        "    lambda modules: scan([m for m in modules if m.__name__ != 'hydra_plugins']))\n"
        "from grpo_exp.__main__ import main\n"
        "sys.argv = ['grpo-exp', *sys.argv[1:]]\n"
        "main()\n"
    )
    swept = subprocess.run(
        [sys.executable, "-c", blind_scan, "-m", "+sweep=frontier", "model=qwen7b", "topology=1x8", "action=plan"]
        + ["hydra.sweeper.axis_values=[8]", "hydra.sweeper.batch_values=[8,16]", f"hydra.sweep.dir={tmp_path}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert swept.returncode == 0, swept.stdout[-2000:] + swept.stderr[-2000:]
    assert json.loads((tmp_path / "frontier.json").read_text())["frontier"] == {"8": 16}
