"""The server's argv is trl's own build_command, read without importing trl on the planning path (serve_argv.py)."""

import os
import subprocess
import sys
from itertools import product

import pytest

from grpo_exp.planning import placement, serve_argv
from tests.helpers import compose_cfg


@pytest.mark.parametrize("max_len, prefix, eager", list(product([None, 4096], [None, True, False], [False, True])))
def test_the_rendered_argv_is_trls_build_command(max_len, prefix, eager, model_cache, monkeypatch):
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    monkeypatch.setenv("GRPO_EXP_CACHE", str(model_cache))
    cfg = compose_cfg(
        "model=qwen7b",
        "topology=2x8",
        "vllm=server",
        f"vllm.max_model_length={max_len or 'null'}",
        f"vllm.enable_prefix_caching={'null' if prefix is None else str(prefix).lower()}",
        f"vllm.enforce_eager={eager}",
    )
    cfg.vllm.server_port = 8123
    args = placement.serve_arguments(cfg, gpus=2)
    extra = ["--max-num-seqs", "64"]
    assert serve_argv.render(args, extra) == build_command(ScriptArguments(**args), extra)


@pytest.mark.slow  # the real CLI in a subprocess
def test_a_plan_does_not_import_trl(model_cache, tmp_path):
    code = (
        "import atexit, sys; atexit.register(lambda: print('trl imported:', 'trl' in sys.modules)); "
        "sys.argv = ['grpo_exp', 'model=qwen7b', 'topology=2x8', 'vllm=server', 'action=plan', "
        f"'hydra.run.dir={tmp_path}/p']; "
        "from grpo_exp.__main__ import main; main()"
    )
    env = {**os.environ, "GRPO_EXP_CACHE": str(model_cache)}
    for _ in range(2):  # the first builds the templates (in a subprocess of its own), the second reads them
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert "trl imported: False" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
        code = code.replace(f"{tmp_path}/p", f"{tmp_path}/q")
