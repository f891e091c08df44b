"""The deepspeed group through DeepSpeed's own config models."""

from grpo_exp.config import deepspeed_check
from tests.helpers import CONF, REPO, problem_keys, problems


def test_shipped_deepspeed_options_pass_deepspeeds_models_and_plan_without_deepspeed():
    """The driver skips DeepSpeed's models for a shipped option's sections: this is where they are checked."""
    import subprocess
    import sys

    shipped = deepspeed_check.shipped_sections()
    assert len(shipped) == len(list((CONF / "deepspeed").glob("*.yaml"))) and any(shipped)
    for sections in shipped:
        assert deepspeed_check.model_problems(sections) == [], sections
    code = (
        "import sys; from tests.helpers import compose_cfg; from grpo_exp.config import config_checks; "
        "assert config_checks.check(compose_cfg('deepspeed=zero3_offload')) == []; print('deepspeed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip().splitlines()[-1:] == ["False"], out.stdout[-2000:] + out.stderr[-2000:]


def test_deepspeed_keys_checked_by_deepspeed():
    assert problems("deepspeed=zero3", "deepspeed.zero_optimization.sub_group_size=2e9") == []
    found = problems("deepspeed=zero3", "deepspeed.zero_optimization.sub_group_sizee=2e9")
    assert problem_keys(found) == ["deepspeed.zero_optimization.sub_group_sizee"] and "sub_group_size" in found[0].fix
    assert problem_keys(problems("deepspeed=zero2", "deepspeed.zero_optimisation.stage=3")) == [
        "deepspeed.zero_optimisation"
    ]
    assert problem_keys(problems("deepspeed=zero2", "deepspeed.zero_optimization.stage=x")) == [
        "deepspeed.zero_optimization.stage"
    ]
    assert (
        deepspeed_check.problems(
            {"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}, "bf16": {"enabled": "auto"}}
        )
        == []
    )
