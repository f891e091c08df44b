"""TRL's `vllm serve` command line without importing trl on the planning path.

trl.scripts.vllm_serve.build_command is how TRL 1.16 starts its server (its weight-transfer, logprobs and scale-out
flags, whatever the installed trl and vLLM add). Importing it costs a plan a third of its time, so it is read once per
installed trl and vLLM version: a subprocess calls build_command on every combination of the flags grpo_exp varies,
with sentinel values in the others, and the argvs are cached as templates under cache_root()/serve_argv/.
tests/planning/test_serve_argv.py proves a rendered argv equals build_command's own.
"""

import json
import subprocess
import sys
from itertools import product

from grpo_exp import cache_root, kept
from grpo_exp.core.packages import installed

# ScriptArguments fields grpo_exp sets, each to a value no real flag or default spells (found back in the argv)
SENTINELS = {
    "model": "@model@",
    "host": "@host@",
    "port": 47001,
    "tensor_parallel_size": 47002,
    "data_parallel_size": 47003,
    "gpu_memory_utilization": 0.47004,
    "dtype": "@dtype@",
    "kv_cache_dtype": "@kv_cache_dtype@",
    "vllm_model_impl": "@vllm_model_impl@",
    "max_model_len": 47005,
}
PYTHON = "@python@"
# Fields whose value decides which flags build_command writes, and their states: one template per combination
SHAPES = {
    "max_model_len": ("unset", "set"),
    "enable_prefix_caching": (None, True, False),
    "enforce_eager": (False, True),
}


def _shape(args: dict) -> str:
    max_len = "unset" if args["max_model_len"] is None else "set"
    return json.dumps([max_len, args["enable_prefix_caching"], bool(args["enforce_eager"])])


def templates() -> dict[str, list[str]]:
    """{shape: argv with placeholders} for the installed trl and vLLM: cached, built once in a subprocess."""
    path = cache_root() / "serve_argv" / f"trl-{installed('trl')}_vllm-{installed('vllm')}.json"
    command = [sys.executable, "-m", "grpo_exp.planning.serve_argv"]
    return json.loads(kept(path, lambda: subprocess.run(command, capture_output=True, check=True).stdout))


def render(args: dict, extra: list[str]) -> list[str]:
    """build_command(ScriptArguments(**args), extra) for `args`: SENTINELS' fields, enable_prefix_caching and
    enforce_eager."""
    values = {str(sentinel): str(args[name]) for name, sentinel in SENTINELS.items() if args[name] is not None}
    values[PYTHON] = sys.executable
    return [values.get(token, token) for token in templates()[_shape(args)]] + list(extra)


def _build_templates() -> dict[str, list[str]]:
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    found = {}
    for max_len, prefix, eager in product(*SHAPES.values()):
        args = {**SENTINELS, "max_model_len": SENTINELS["max_model_len"] if max_len == "set" else None}
        argv = build_command(ScriptArguments(**args, enable_prefix_caching=prefix, enforce_eager=eager))
        found[_shape({**args, "enable_prefix_caching": prefix, "enforce_eager": eager})] = [PYTHON, *argv[1:]]
    return found


if __name__ == "__main__":
    print(json.dumps(_build_templates()))
