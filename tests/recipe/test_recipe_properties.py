"""Every experiment the importer writes composes and plans: recipes generated over the importer's known
fields (TRL's GRPOConfig, its script arguments, open-r1's, older TRL's, accelerate's keys) with YAML's
booleans, nulls, numbers, dates, strings and lists, not only the shipped example (hypothesis)."""

import datetime
import json
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_exp import recipe
from grpo_exp.config import keys
from grpo_exp.config.trl_schema import TrainerFields, VllmFields
from grpo_exp.planning import planner
from grpo_exp.recipe.fields import LATER, TRAINER_FIELDS, VLLM_FIELDS
from tests.helpers import check, compose_cfg, examples

pytestmark = pytest.mark.slow  # a few hundred imports and plans: make test, not make test-fast

SPECIAL = [
    "use_vllm",
    "vllm_mode",
    "model_name_or_path",
    "dataset_name",
    "datasets",
    "reward_funcs",
    "use_peft",
    "lora_target_modules",
    "output_dir",
    "report_to",
    "dtype",
    "torch_dtype",
    "warmup_ratio",
    "seed",
    "run_name",
    "deepspeed",
    "ddp_timeout",
    *sorted(LATER),
]
FIELDS = sorted(TRAINER_FIELDS) + [f"vllm_{f}" for f in sorted(VLLM_FIELDS)] + sorted(keys.HOMES) + SPECIAL
WORDS = [
    "off",
    "no",
    "auto",
    "cuda:1",
    "cuda:9",
    "all-linear",
    "q_proj",
    "colocate",
    "server",
    "wandb",
    "none",
    "steps",
    "bf16",
    "test",
    "${oc.env:NOPE}",
    "a\nb",
    "  ",
    "",
    "naïve ✓",
    "x" * 300,
    "2025-01-31",
]
SCALARS = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
    st.dates(min_value=datetime.date(2000, 1, 1), max_value=datetime.date(2030, 1, 1)),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.sampled_from(["a", "path"]), SCALARS))
_DEFAULTS = {
    **{name: f.default for name, f in TrainerFields.__dataclass_fields__.items()},
    **{f"vllm_{name}": f.default for name, f in VllmFields.__dataclass_fields__.items()},
}
_OF_TYPE = {
    bool: st.booleans(),
    int: st.integers(-3, 2**40),
    float: st.floats(-10, 1e6, allow_nan=False),
    str: st.one_of(st.sampled_from(WORDS), st.text(max_size=8)),
}


def value_for(name: str):
    """A value of the field's own type (TRL's default's) seven times in eight, any YAML value otherwise: most
    recipes then pass the importer, and the odd value still comes."""
    typed = _OF_TYPE.get(type(_DEFAULTS.get(name)))
    if typed is None:
        return VALUES
    return st.integers(0, 7).flatmap(lambda pick: typed if pick else VALUES)  # one_of would flatten VALUES' branches


# GRPOConfig's own fields three times as often as the rest: recipes are mostly those
FIELD_NAMES = st.integers(0, 3).flatmap(lambda pick: st.sampled_from(sorted(TRAINER_FIELDS) if pick else FIELDS))
RECIPES = st.lists(FIELD_NAMES, min_size=1, max_size=5, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: value_for(name) for name in names})
)
ACCELERATE = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "distributed_type": st.sampled_from(["DEEPSPEED", "MULTI_GPU", "NO", "FSDP", 3, None]),
            "num_processes": st.one_of(st.integers(-1, 9), st.sampled_from(["4", "x", None])),
            "num_machines": st.one_of(st.integers(0, 3), st.none()),
            "mixed_precision": st.sampled_from(["bf16", "fp16", "no", False, "fp8"]),
            "deepspeed_config": st.one_of(
                st.none(), st.fixed_dictionaries({"zero_stage": st.sampled_from([0, 1, 2, 3, 4, "2", None])})
            ),
        }
    ),
)
SETTINGS = settings(
    max_examples=examples(25),  # make test-matrix: 25
    deadline=None,
    derandomize=True,  # the same examples every run: a CI failure reproduces here
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _import(tmp_path: Path, fields: dict, accelerate: dict | None, skip=()) -> tuple[int, str, Path]:
    """The importer's exit code on these files, the experiment's name and the config dir it writes into."""
    name = f"p{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "conf"
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(fields, allow_unicode=True))
    args = [str(tmp_path / f"{name}.yaml"), "--out", str(conf / "experiment" / f"{name}.yaml")]
    if accelerate is not None:
        (tmp_path / f"{name}.acc.yaml").write_text(yaml.safe_dump(accelerate))
        args += ["--accelerate", str(tmp_path / f"{name}.acc.yaml")]
    for field in skip:
        args += ["--skip", field]
    return recipe.main(args), name, conf


def _plan(name: str, conf: Path, *overrides: str):
    """The driver's checks of `experiment=<name>` (from the user's config dir), then its memory plan."""
    cfg = compose_cfg(f"experiment={name}", f"hydra.searchpath=[file://{conf}]", "action=plan", *overrides)
    plan, problems = check(cfg, Path("/nonexistent-run-dir"), gpus=0)
    for problem in problems:  # refused: by key, in the driver's one form
        assert problem.key and problem.why and problem.fix, problem
    return planner.memory_plan(cfg, plan) if plan is not None and not problems else None


@SETTINGS
@given(fields=RECIPES, accelerate=ACCELERATE)
def test_whatever_a_recipe_holds_the_import_refuses_by_field_or_writes_what_composes_and_plans(
    tmp_path_factory, fields, accelerate, capsys
):
    tmp_path = tmp_path_factory.mktemp("recipe")
    code, name, conf = _import(tmp_path, fields, accelerate)
    out, err = capsys.readouterr()
    assert code in (0, 2) and "Traceback" not in out + err
    written = conf / "experiment" / f"{name}.yaml"
    if code == 2:
        assert not written.exists() and "nothing written" in err
        return
    _plan(name, conf)  # composes; every problem the plan finds is named by key (no exception)


# Valid recipes: what TRL itself accepts, in the forms of its releases. Each must import and plan clean.
VALID_TRAINER = {
    "learning_rate": st.sampled_from([1e-6, 3e-6, 1e-5]),
    "beta": st.sampled_from([0.0, 0.04]),
    "temperature": st.sampled_from([0.7, 1.0]),
    "max_completion_length": st.sampled_from([128, 256, 1024]),
    "gradient_accumulation_steps": st.integers(1, 8),
    "gradient_checkpointing": st.booleans(),
    "logging_steps": st.integers(1, 10),
    "save_strategy": st.sampled_from(["no", "steps", "epoch", False]),
    "lr_scheduler_type": st.sampled_from(["cosine", "linear", "constant_with_warmup"]),
    "warmup_ratio": st.sampled_from([0.0, 0.05, 0.1]),
    "scale_rewards": st.sampled_from([True, False, "group", "batch", "none"]),
    "loss_type": st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo"]),
    "num_iterations": st.integers(1, 2),
    "epsilon_high": st.sampled_from([0.2, 0.28]),
    "log_completions": st.booleans(),
    "max_prompt_length": st.sampled_from([256, 512]),
    "seed": st.integers(0, 1000),
    "overwrite_output_dir": st.booleans(),
    "dataset_configs": st.just(["all"]),
    "report_to": st.sampled_from(["none", ["wandb"], "wandb"]),
}


@st.composite
def valid_recipes(draw):
    generations = draw(st.sampled_from([2, 4, 8]))
    fields = {
        "model_name_or_path": draw(st.sampled_from(["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"])),
        "dataset_name": "some-user/math-data",
        "num_generations": generations,
        "per_device_train_batch_size": generations * draw(st.integers(1, 2)),
    }
    for name in draw(st.lists(st.sampled_from(sorted(VALID_TRAINER)), max_size=6, unique=True)):
        fields[name] = draw(VALID_TRAINER[name])
    trainers = draw(st.integers(1, 7))
    vllm = draw(st.sampled_from(["off", "colocate", "server", "device"]))
    if vllm == "off":
        fields["use_vllm"] = False
    elif vllm == "device":  # TRL <= 0.16
        fields.update(use_vllm=True, vllm_device=draw(st.sampled_from(["auto", f"cuda:{trainers}"])))
    else:
        fields.update(use_vllm=True, vllm_mode=vllm, vllm_gpu_memory_utilization=0.3 if vllm == "colocate" else 0.9)
    if draw(st.booleans()):
        fields.update(eval_strategy="steps", eval_steps=10, per_device_eval_batch_size=generations)
    if draw(st.booleans()):
        fields.update(
            use_peft=True,
            lora_r=16,
            lora_alpha=32,
            lora_target_modules=draw(st.sampled_from(["all-linear", ["q_proj", "v_proj", "embed_tokens"]])),
        )
    stage = draw(st.sampled_from([None, 0, 1, 2, 3]))
    accelerate = {
        "num_machines": 1,
        "num_processes": trainers,
        "mixed_precision": "bf16",
        "distributed_type": "MULTI_GPU" if stage is None else "DEEPSPEED",
    }
    if stage is not None:
        accelerate["deepspeed_config"] = {"zero_stage": stage}
    return fields, accelerate


@settings(SETTINGS, max_examples=examples(15))
@given(case=valid_recipes())
def test_a_recipe_trl_accepts_imports_and_plans_without_a_problem(tmp_path_factory, case, capsys):
    fields, accelerate = case
    tmp_path = tmp_path_factory.mktemp("recipe")
    code, name, conf = _import(tmp_path, fields, accelerate)
    assert code == 0, capsys.readouterr().err + json.dumps(fields)
    cfg = compose_cfg(f"experiment={name}", f"hydra.searchpath=[file://{conf}]", "action=plan")
    plan, problems = check(cfg, Path("/nonexistent-run-dir"), gpus=0)
    assert problems == [], "\n".join(map(str, problems)) + "\n" + json.dumps(fields) + json.dumps(accelerate)
    assert plan.world_size == accelerate["num_processes"]
    assert planner.memory_plan(cfg, plan).train["peak_gib"] > 0


# The recipes people write beyond TRL's own fields (issue: imports that must always plan): rewards without a home
# among known ones, with reward_weights; inline chat templates; TRL 2.0's renamed fields; open-r1's script keys.
REWARD_NAMES = [
    "accuracy",
    "format",
    "tag_count",
    "soft_overlong_punishment",
    "cosine",
    "tests.user_code.record_prompts",
]
OPEN_R1_EXTRAS = {
    "chat_template": st.sampled_from(
        ["{% for m in messages %}{{ m['content'] }}{% endfor %}", "{{ '<|' + messages[0]['role'] + '|>\\n' }}"]
    ),
    "use_liger_kernel": st.booleans(),
    "vllm_importance_sampling_cap": st.sampled_from([2.0, 3.0]),
    "use_transformers_paged": st.booleans(),
    "system_prompt": st.just("Think, then answer."),
    "dataset_prompt_column": st.just("problem"),
    "cosine_max_len": st.just(1000),
    "repetition_n_grams": st.just(3),
    "code_language": st.just("python"),
    "benchmarks": st.just([]),
}


@st.composite
def open_r1_recipes(draw):
    fields, accelerate = draw(valid_recipes())
    names = draw(st.lists(st.sampled_from(REWARD_NAMES), min_size=1, max_size=4, unique=True))
    fields["reward_funcs"] = names
    if draw(st.booleans()):
        fields["reward_weights"] = [draw(st.sampled_from([0.5, 1.0])) for _ in names]
    for name in draw(st.lists(st.sampled_from(sorted(OPEN_R1_EXTRAS)), max_size=5, unique=True)):
        fields[name] = draw(OPEN_R1_EXTRAS[name])
    return fields, accelerate


@settings(SETTINGS, max_examples=examples(15))
@given(case=open_r1_recipes())
def test_an_open_r1_recipe_imports_after_the_skips_its_fix_lines_name_and_plans_clean(tmp_path_factory, case, capsys):
    fields, accelerate = case
    tmp_path = tmp_path_factory.mktemp("recipe")
    code, name, conf = _import(tmp_path, fields, accelerate)
    skips = []
    if code == 2:  # the user follows the fix lines once
        err = capsys.readouterr().err
        skips = sorted({line.split("--skip ", 1)[1].split()[0] for line in err.splitlines() if "fix: --skip " in line})
        assert skips, err
        code, name, conf = _import(tmp_path, fields, accelerate, skips)
    assert code == 0, capsys.readouterr().err + json.dumps(fields)
    assert not {"chat_template", "use_liger_kernel", "vllm_importance_sampling_cap"} & set(skips)
    cfg = compose_cfg(f"experiment={name}", f"hydra.searchpath=[file://{conf}]", "action=plan")
    plan, problems = check(cfg, Path("/nonexistent-run-dir"), gpus=0)
    assert problems == [], "\n".join(map(str, problems)) + "\n" + json.dumps(fields) + f"\nskips {skips}"
    if "chat_template" in fields:
        assert cfg.model.chat_template == fields["chat_template"]
