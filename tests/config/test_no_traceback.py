"""No traceback on any input a user can type: the three classes random configs found (a colocated engine planned
on a CPU machine when the plan predicts an OOM, an interpolation that resolves to the wrong type, an experiment
name longer than a file name) exit 2 with the key named or plan; and a property test generates configs of those
classes, and across groups, through the driver's whole job (action=plan)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_exp.launching import job
from tests.helpers import group_options, report, run_driver, run_job


def test_a_colocated_engine_on_a_cpu_machine_plans(tmp_path):
    ended = run_job("model=qwen3b", "topology=local", "vllm=colocate", "action=plan", run_dir=tmp_path / "run")
    assert ended.code == 0 and not ended.memory.fits


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("peft.target_modules=${seed}", "peft.target_modules"),
        ("trainer.per_device_train_batch_size=${model.name}", "trainer.per_device_train_batch_size"),
        ("topology.gpus_per_node=${run_name}", None),  # null: an Optional[int] takes it
        ("data.max_prompt_length=${trainer.learning_rate}", "data.max_prompt_length"),
    ],
)
def test_an_interpolation_of_the_wrong_type_is_refused_by_its_key(override, key):
    text, _ = report("peft=lora", override)
    if key is None:
        assert text == ""
    else:
        assert text.startswith(f"{key}: ") and "interpolation" in text


@pytest.mark.slow  # the CLI in a subprocess
def test_an_experiment_name_longer_than_a_file_name_exits_2(tmp_path):
    result = run_driver(tmp_path, tmp_path / "cache", f"experiment={'x' * 300}", "action=plan")
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert "experiment" in result.stderr + result.stdout


VALUES = {
    "vllm": group_options("vllm"),
    "topology": group_options("topology"),
    "model": [m for m in group_options("model") if m != "auto"],
    "deepspeed": group_options("deepspeed"),
    "peft": group_options("peft"),
}
TYPED_KEYS = ["peft.target_modules", "trainer.num_generations", "data.max_prompt_length", "vllm.gpu_memory_utilization"]
INTERPOLATIONS = ["${seed}", "${model.name}", "${trainer.learning_rate}", "${topology.nnodes}", "${experiment}"]


@st.composite
def configs(draw) -> list[str]:
    chosen = [f"{group}={draw(st.sampled_from(options))}" for group, options in VALUES.items() if draw(st.booleans())]
    if draw(st.booleans()):
        chosen.append(f"{draw(st.sampled_from(TYPED_KEYS))}={draw(st.sampled_from(INTERPOLATIONS))}")
    if draw(st.booleans()):
        chosen.append(f"trainer.max_completion_length={draw(st.sampled_from([16, 512, 4096]))}")
    return chosen


@pytest.mark.slow  # 25 driver jobs (~15 s)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=configs())
def test_any_generated_config_plans_or_is_refused_without_a_traceback(overrides, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    ended = run_job(*overrides, "action=plan", run_dir=run_dir / "run")
    assert isinstance(ended, job.Ended) and ended.code in (0, 2), (overrides, ended.code)
