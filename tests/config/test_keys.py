"""Nothing set is dropped and what TRL accepts is accepted: deprecated aliases resolve as transformers
resolves them, TRL's coerced values are accepted, every unknown key is reported at once with its
home, and no input makes the driver raise or hang: what a library would refuse at launch is refused
before it. In-process through the driver's own steps (tests/test_cli.py has the exit-code contract)."""

import dataclasses
import importlib.util
import math
import random

import pytest
from omegaconf import OmegaConf

from grpo_exp.config import keys
from grpo_exp.config.trl_schema import CHOICES, TrainerFields
from tests.helpers import compose_cfg, every, fast_lane, matrix, report

# --- aliases and coerced values ------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias,value,canonical",
    [
        ("trainer.gradient_checkpointing", "true", ("trainer.activation_checkpointing", True)),
        (
            "trainer.gradient_checkpointing_kwargs",
            "{use_reentrant:false}",
            ("trainer.activation_checkpointing_kwargs", {"use_reentrant": False}),
        ),
        ("trainer.use_transformers_paged", "true", ("trainer.use_transformers_continuous_batching", True)),
        ("vllm.importance_sampling_cap", "2.5", ("vllm.importance_sampling_clip_max", 2.5)),
        ("trainer.use_liger_kernel", "true", ("trainer.model_init_kwargs.use_kernels", True)),
    ],
)
def test_a_deprecated_alias_is_honoured_as_trl_resolves_it(alias, value, canonical):
    text, cfg = report(f"{alias}={value}", "action=plan")  # a plan: the `kernels` use_kernels needs is run's check
    assert text == "", text
    key, expected = canonical
    got = OmegaConf.select(cfg, key)
    assert (OmegaConf.to_container(got) if OmegaConf.is_config(got) else got) == expected
    # one name left: GRPOConfig gets no conflicting pair
    assert OmegaConf.select(cfg, alias) == keys.ALIASES[alias].unset


def test_names_trl_2_removes_are_written_under_their_successors_with_a_note(caplog):
    """A recipe written for TRL 1.16 keeps working after 2.0: each renamed field lands on its successor, saying so;
    the hub kernels use_liger_kernel now means need `kernels`, which the run's preflight asks for."""
    from grpo_exp.launching import preflight

    with caplog.at_level("WARNING"):
        _, cfg = report("trainer.use_liger_kernel=true", "vllm.importance_sampling_cap=2.0")
    said = caplog.text
    assert "trainer.use_liger_kernel=True is trainer.model_init_kwargs.use_kernels=True: TRL 2.0 removes" in said
    assert "vllm.importance_sampling_clip_max=2.0" in said
    needs = [p for p in preflight.check_libraries(cfg) if p.key == "trainer.model_init_kwargs.use_kernels"]
    assert bool(needs) == (importlib.util.find_spec("kernels") is None)


def test_alias_and_its_name_set_to_different_values_are_refused_naming_both():
    text, _ = report("trainer.gradient_checkpointing=true", "trainer.activation_checkpointing=false")
    assert "trainer.gradient_checkpointing: is True while trainer.activation_checkpointing is False" in text
    # agreeing: fine
    assert report("trainer.gradient_checkpointing=true", "trainer.activation_checkpointing=true")[0] == ""


def test_the_alias_reaches_grpo_config_and_the_plan(build, tmp_path):
    _, cfg = report("model=qwen7b", "topology=1x8", "trainer.gradient_checkpointing=true", "action=plan")
    args = build.grpo_config(cfg, tmp_path, use_cpu=True)
    # transformers mirrors the new name
    assert args.activation_checkpointing is True and args.gradient_checkpointing is True


@pytest.mark.parametrize("value,expected", [("false", "none"), ("true", "group"), ("batch", "batch")])
def test_scale_rewards_takes_trls_booleans(build, value, expected, tmp_path):
    text, cfg = report(f"trainer.scale_rewards={value}")
    assert text == "" and cfg.trainer.scale_rewards == expected
    assert build.grpo_config(cfg, tmp_path, use_cpu=True).scale_rewards == expected


# --- every unknown key at once, each with its home ------------------------------------------------


def test_every_unknown_key_is_reported_at_once_with_its_home():
    text, cfg = report(
        "trainer.max_prompt_length=512",
        "trainer.torch_dtype=bfloat16",
        "trainer.use_vllm=true",
        "trainer.vllm_device=cuda:7",
        "trainer.not_a_field=1",
        "trainer.temperature=0",
    )
    expected = {
        "trainer.max_prompt_length": "use data.max_prompt_length",
        "trainer.torch_dtype": "use model.dtype",
        "trainer.use_vllm": "use vllm (vllm=off | colocate | server)",
        "trainer.vllm_device": "use vllm.gpus",
        "trainer.not_a_field": "unknown key",
        "trainer.temperature": "it must be > 0",  # the rest of the config is still checked
    }
    for key, words in expected.items():
        assert f"\n{key}:" in f"\n{text}" and words in text, (key, text)


def test_every_home_is_a_key_that_exists():
    cfg = compose_cfg()
    groups = ("vllm", "peft", "data.rewards")  # a group choice, or an open mapping
    for name, home in keys.HOMES.items():
        if home.key is None:
            assert home.note, name  # no home: the reason is given
        elif home.key not in groups and not home.key.startswith(("trainer.model_init_kwargs.", "model.quantization.")):
            assert OmegaConf.select(cfg, home.key, default="<missing>") != "<missing>", (name, home.key)


def test_the_homes_cover_trls_script_dataclasses():
    from trl import ModelConfig, ScriptArguments
    from trl.scripts.grpo import GRPOScriptArguments

    names = {f.name for cls in (ModelConfig, ScriptArguments, GRPOScriptArguments) for f in dataclasses.fields(cls)}
    assert names - set(keys.HOMES) == set()


# --- no traceback, no hang: refused before launch ---------------------------------------------------

REFUSED = {  # overrides -> the key the report names (the random-config findings)
    "model=null": "model",
    "=5": "=5",
    "trainer.sapo_temperature_neg=" + "9" * 500: "trainer.sapo_temperature_neg",
    "model=qwen7b peft=lora model.num_attention_heads=1000000000000000000000000000000": "model.num_attention_heads",
    "topology.nnodes=1000000000000000000000000000000": "topology.nnodes",
    "deepspeed=zero2 deepspeed.train_micro_batch_size_per_gpu=5": "deepspeed.train_micro_batch_size_per_gpu",
    "deepspeed=zero2 deepspeed.train_batch_size=Infinity": "deepspeed.train_batch_size",
    "deepspeed=zero2 deepspeed.train_batch_size=7": "deepspeed.train_batch_size",
    "deepspeed=none deepspeed.zero_optimization.stage=2": "deepspeed",
    "model=qwen7b trainer.fp16=true": "trainer.fp16",
    "deepspeed=zero2 deepspeed.fp16.enabled=true deepspeed.bf16.enabled=true": "deepspeed.fp16.enabled",
    "trainer.logging_steps=1.5": "trainer.logging_steps",
    "trainer.save_steps=2.5": "trainer.save_steps",
    "trainer.lr_scheduler_type=reduce_lr_on_plateau": "trainer.lr_scheduler_type",
    "trainer.lr_scheduler_type=cosine_with_min_lr": "trainer.lr_scheduler_kwargs",
    "trainer.lr_scheduler_type=cosine trainer.lr_scheduler_kwargs={nope:1}": "trainer.lr_scheduler_kwargs",
    "trainer.torch_empty_cache_steps=0": "trainer.torch_empty_cache_steps",
    "trainer.debug=bogus": "trainer.debug",
    "trainer.ddp_backend=bogus": "trainer.ddp_backend",
    "logger.name=foo": "logger.name",
    "trainer.dataloader_prefetch_factor=2": "trainer.dataloader_prefetch_factor",
    "trainer.learning_rate=nan": "trainer.learning_rate",
    "trainer.per_device_train_batch_size=100000000000": "trainer.per_device_train_batch_size",
    # the classes behind the last random-config findings: DeepSpeed's hand-read values, names a library must
    # know given as numbers, an unresolvable interpolation inside an untyped mapping
    "deepspeed=zero2 deepspeed.optimizer.type=0": "deepspeed.optimizer.type",
    "deepspeed=zero2 deepspeed.optimizer.type=NoSuchOptimizer": "deepspeed.optimizer.type",
    "deepspeed=zero2 deepspeed.scheduler.type=Nope": "deepspeed.scheduler.type",
    "deepspeed=zero2 deepspeed.communication_data_type=16": "deepspeed.communication_data_type",
    "deepspeed=zero2 deepspeed.optimizer=5": "deepspeed.optimizer",
    "model.model_type=5": "model.model_type",
    "trainer.model_init_kwargs={a:${oc.env:GRPO_EXP_UNSET_VARIABLE}}": "trainer.model_init_kwargs.a",
}


@pytest.mark.parametrize(  # the fast lane: every sixth case
    "items", fast_lane(list(REFUSED), every(6, list(REFUSED))), ids=[i[:60] for i in REFUSED]
)
def test_what_a_library_would_refuse_at_launch_is_refused_before_it(items):
    text, _ = report(*items.split())
    assert text and f"{REFUSED[items]}:" in text, text


def test_vllm_max_model_length_below_prompt_and_completion_is_a_note_not_a_refusal():
    from grpo_exp.planning import placement, planner

    text, cfg = report("model=qwen7b", "topology=2x8", "vllm=server", "action=plan", "vllm.max_model_length=128")
    assert text == ""
    memory = planner.memory_plan(cfg, placement.make_plan(cfg, "config.yaml", detected_gpus=0))
    assert any("vLLM ends such generations at its limit" in note for note in memory.notes)


def _grpo_config_accepts(build, cfg, tmp_path) -> None:
    build.grpo_config(cfg, tmp_path, use_cpu=True)  # raises what TRL / transformers would raise in every worker


# Values a random config draws from: wrong types, huge, negative, nan, Hydra syntax.
FUZZ_VALUES = [
    "-1",
    "0",
    "1",
    "2.5",
    "1e400",
    "-1e308",
    "nan",
    "inf",
    "10" + "0" * 40,
    "true",
    "null",
    "''",
    "abc",
    "[1,2]",
    "{a:1}",
    "${oc.env:NOPE}",
    "?",
    "[",
    "1,2",
    "'  '",
    "auto",
    "-0.5",
    "3",
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])  # 2 x 80: make test's workers share them
def test_random_configs_never_raise_and_what_the_driver_accepts_trl_builds(build, seed, tmp_path):
    """160 seeded random configs over every settable trainer and vllm key: the driver either reports
    problems (naming keys) or accepts, and whatever it accepts GRPOConfig builds."""
    rng = random.Random(seed)
    schema = OmegaConf.to_container(compose_cfg(), resolve=True)
    in_process_only = {"trainer.ddp_backend"}  # GRPOConfig initialises that process group when built: a worker's job
    settable = [f"trainer.{k}" for k in schema["trainer"] if f"trainer.{k}" not in in_process_only] + [
        f"vllm.{k}" for k in schema["vllm"]
    ]
    accepted = 0
    for _ in range(80):
        items = [f"{key}={rng.choice(FUZZ_VALUES)}" for key in rng.sample(settable, rng.randint(1, 3))]
        text, cfg = report(*items)
        if not text and cfg is not None:
            accepted += 1
            try:
                _grpo_config_accepts(build, cfg, tmp_path)
            except Exception as exc:  # the driver accepted what TRL refuses: a gap in the checks
                pytest.fail(f"{items}: accepted by the driver, refused by GRPOConfig: {exc}")
    assert accepted >= 3  # the draw also exercises valid configs


# DeepSpeed keys a user sets, and what DeepSpeed reads them as: its own models' sections and the ones it reads
# by hand (optimizer, scheduler, communication_data_type, ...).
DEEPSPEED_KEYS = [
    "zero_optimization.stage",
    "zero_optimization.overlap_comm",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.offload_optimizer.device",
    "optimizer.type",
    "optimizer.params.lr",
    "scheduler.type",
    "scheduler.params.warmup_num_steps",
    "communication_data_type",
    "gradient_clipping",
    "bf16.enabled",
    "fp16.loss_scale",
    "steps_per_print",
    "checkpoint.tag_validation",
    "zero_allow_untested_optimizer",
    "prescale_gradients",
]
MODEL_KEYS = ["model_type", "hidden_size", "num_attention_heads", "vocab_size", "tie_word_embeddings", "dtype"]


@pytest.mark.slow
def test_random_deepspeed_and_model_values_never_raise_and_what_is_accepted_the_library_builds():
    """70 seeded random values for DeepSpeed's keys and the model's (where the last findings were): the
    driver reports them by key, or DeepSpeed builds its config from what the driver accepted (auto filled as
    transformers fills it) and transformers builds the model's config."""
    import os

    from transformers import AutoConfig

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.config import DeepSpeedConfig

    rng = random.Random(7)
    accepted = {"deepspeed": 0, "model": 0}
    for _ in range(70):
        group = rng.choice(["deepspeed", "model"])
        keys_ = DEEPSPEED_KEYS if group == "deepspeed" else MODEL_KEYS
        values = FUZZ_VALUES + (
            ["AdamW", "WarmupLR", "fp32", "64"] if group == "deepspeed" else ["qwen2", "64", "llama"]
        )
        items = [f"{group}.{k}={rng.choice(values)}" for k in rng.sample(keys_, rng.randint(1, 2))]
        text, cfg = report(*(["deepspeed=zero2"] if group == "deepspeed" else []), *items)
        if text or cfg is None:
            continue
        accepted[group] += 1
        try:
            if group == "deepspeed":
                ds = OmegaConf.to_container(cfg.deepspeed, resolve=True)
                filled = {k: v for k, v in ds.items() if v != "auto"}
                filled.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)
                DeepSpeedConfig(filled)
            else:
                m = cfg.model
                AutoConfig.for_model(
                    m.model_type,
                    hidden_size=m.hidden_size,
                    num_attention_heads=m.num_attention_heads,
                    vocab_size=m.vocab_size,
                    tie_word_embeddings=m.tie_word_embeddings,
                )
        except Exception as exc:  # the driver accepted what the library refuses: a gap in the checks
            pytest.fail(f"{items}: accepted by the driver, refused by the library: {type(exc).__name__}: {exc}")
    assert min(accepted.values()) >= 3, accepted  # the draw also exercises values the libraries take


# --- every trainer field set on the command line is what GRPOConfig holds ----------------------------

# A valid value other than grpo_exp's default, where the generic rule below does not give one.
VALUES = {
    "per_device_train_batch_size": 8,
    "num_generations": 2,
    "generation_batch_size": 16,
    "neftune_noise_alpha": 5.0,
    "torch_empty_cache_steps": 10,
    "eval_steps": 5,
    "per_device_eval_batch_size": 4,
    "num_generations_eval": 2,
    "metric_for_best_model": "reward",
    "eval_accumulation_steps": 2,
    "ddp_bucket_cap_mb": 25,
    "router_aux_loss_coef": 0.01,
    "max_tool_calling_iterations": 3,
    "off_policy_mask_threshold": 0.5,
    "num_completions_to_print": 2,
    "max_steps": 5,
    "warmup_steps": 0.1,
    "top_p": 0.9,
    "min_p": 0.1,
    "adam_beta1": 0.8,
    "adam_beta2": 0.99,
    "max_grad_norm": 0.5,
    "label_smoothing_factor": 0.1,
    "top_entropy_quantile": 0.5,
    "ref_model_mixup_alpha": 0.5,
    "lr_scheduler_kwargs": {},
    "optim_args": "x=1",
    "logging_strategy": "epoch",
    "save_strategy": "no",
    "hub_strategy": "end",
    "lr_scheduler_type": "cosine",
    "optim": "adamw_torch",
    "include_num_input_tokens_seen": "all",
    "debug": "underflow_overflow",
    "pad_to_multiple_of": 8,
    "torch_compile_backend": "inductor",
    "torch_compile_mode": "reduce-overhead",
    "dataloader_multiprocessing_context": "spawn",
    "train_sampling_strategy": "sequential",
    "loss_type": "grpo",
    "scale_rewards": "batch",
    "importance_sampling_level": "sequence",
    "multi_objective_aggregation": "normalize_then_sum",
    "reward_weights": [1.0, 2.0, 3.0],
    "generation_kwargs": {"stop": ["x"]},
    "chat_template_kwargs": {"enable_thinking": False},
    "model_init_kwargs": {"attn_implementation": "eager"},
    "liger_kernel_config": {"rms_norm": True},
    "accelerator_config": {"split_batches": False},
    "transformers_continuous_batching_config": {"max_batch_tokens": 64},
    "activation_checkpointing_kwargs": {"use_reentrant": False},
    "optim_target_modules": ["q_proj"],
    "label_names": ["labels"],
    "include_for_metrics": ["inputs"],
    "cache_implementation": "static",
    "dataloader_num_workers": 1,
    "dataloader_prefetch_factor": 2,
    "ddp_backend": "gloo",
    "log_level": "info",
    "log_level_replica": "info",
    "steps_per_generation": None,
    "delta": 1.5,
    "epsilon_high": 0.28,
    "trackio_static_space_id": "me/space",
    "data_seed": 3,
}
VALUES["generation_batch_size"] = 16  # with steps_per_generation unset (TRL derives one from the other)
# Fields a CPU test cannot set to another value, each with the reason (the rest of the table is generic).
NOT_SETTABLE_HERE = {
    "bf16": "the tiny model is float32 on CPU; bf16 follows model.dtype (tested: test_bf16_follows_model_dtype)",
    "fp16": "fp16 mixed precision needs a GPU",
    "fp16_full_eval": "needs a GPU",
    "bf16_full_eval": "needs bf16 support for eval",
    "tf32": "TF32 needs an Ampere GPU",
    "auto_find_batch_size": "TRL refuses it for GRPO",
    "push_to_hub": "needs the hub",
    "hub_model_id": "needs the hub",
    "log_completions_hub_repo": "needs the hub and log_completions",
    "sync_ref_model": "needs beta > 0 (tested in test_validate)",
    "use_transformers_paged": "a deprecated alias (tested above)",
    "gradient_checkpointing": "a deprecated alias (tested above)",
    "gradient_checkpointing_kwargs": "a deprecated alias (tested above)",
    "trackio_space_id": "needs the hub",
    "trackio_bucket_id": "needs the hub",
    "hub_private_repo": "needs the hub",
    "hub_revision": "needs the hub",
    "hub_always_push": "needs the hub",
    "steps_per_generation": "exclusive with generation_batch_size (tested in test_validate)",
    "torch_compile": "compiles the model at build",
    "use_liger_kernel": "a deprecated alias of model_init_kwargs.use_kernels (TRL 2.0), which needs `kernels`",
    "use_cpu": "owned",
    "dataloader_prefetch_factor": "needs dataloader_num_workers > 0 (refused without it: REFUSED above)",
    "ddp_backend": "GRPOConfig initialises that process group when built (the e2e runs train over gloo)",
}


# Fields that act only with evaluation: set with held-out prompts and eval_strategy=steps beside them.
EVAL_FIELDS = {
    "eval_strategy",
    "do_eval",
    "load_best_model_at_end",
    "metric_for_best_model",
    "greater_is_better",
    "eval_steps",
    "eval_on_start",
    "per_device_eval_batch_size",
    "num_generations_eval",
    "eval_delay",
    "batch_eval_metrics",
}


def _other_value(name: str, f: dataclasses.Field, default):
    if name in VALUES:
        return VALUES[name]
    if f"trainer.{name}" in CHOICES:
        return next(c for c in CHOICES[f"trainer.{name}"] if c != default)
    if isinstance(default, bool) or default is None and "bool" in str(f.type):
        return not default
    if isinstance(default, int):
        return default + 1 if default >= 0 else 3
    if isinstance(default, float):
        return default * 2 if default else 0.5
    if isinstance(default, str):
        return default + "x" if default else "x"
    raise AssertionError(f"no generic value for {name}: add it to VALUES or NOT_SETTABLE_HERE")


def _expected(value):
    return getattr(value, "value", value)


TRAINER_FIELDS = dataclasses.fields(TrainerFields)


@pytest.mark.slow
@pytest.mark.parametrize(
    "field",
    # make test: every fifth field (test_any_grpo_config_field_reaches_grpo_config sets several at once in
    # make test-fast); make test-matrix: every field
    matrix(list(TRAINER_FIELDS), every(5, list(TRAINER_FIELDS))),
    ids=lambda f: f.name,
)
def test_every_trainer_field_set_on_the_command_line_is_what_grpo_config_holds(build, field, tmp_path):
    if field.name in NOT_SETTABLE_HERE:
        pytest.skip(NOT_SETTABLE_HERE[field.name])
    default = compose_cfg().trainer[field.name]
    value = _other_value(
        field.name, field, OmegaConf.to_container(default) if OmegaConf.is_config(default) else default
    )
    if isinstance(value, (dict, list, bool)):  # Hydra's override grammar: {k: v}, [a, b], true
        rendered = str(value).replace("'", "").replace("False", "false").replace("True", "true")
    else:
        rendered = f"'{value}'" if isinstance(value, str) else value  # quoted: a string, whatever it holds
    beside = []
    if field.name in EVAL_FIELDS:
        (tmp_path / "eval.jsonl").write_text(
            "".join(f'{{"prompt": "{a} + 1?", "answer": "{a + 1}"}}\n' for a in range(8))
        )
        beside = [f"data.eval_path={tmp_path / 'eval.jsonl'}"] + (
            ["trainer.eval_strategy=steps"] if field.name != "eval_strategy" else []
        )
    problems, cfg = report(f"trainer.{field.name}={rendered}", *beside)
    assert problems == "" and cfg is not None, problems
    args = build.grpo_config(cfg, tmp_path, use_cpu=True)
    got = _expected(getattr(args, field.name))
    if isinstance(value, float) and isinstance(got, float):
        assert math.isclose(got, value), (field.name, got, value)
    elif field.name == "debug":
        assert [_expected(d) for d in got] == [value]
    elif field.name == "accelerator_config":  # GRPOConfig turns the mapping into accelerate's AcceleratorConfig
        assert got.split_batches is False
    elif field.name == "model_init_kwargs":  # model.dtype owns the dtype and adds it
        assert got == {**value, "dtype": "float32"}
    else:
        assert got == value or (isinstance(got, (list, tuple)) and list(got) == value), (field.name, got, value)


def test_hydra_composes_once_unless_the_command_line_can_set_the_mode():
    from grpo_exp.config import errors, overrides

    assert not overrides.mode_needs_compose(["model=qwen7b", "-m", "trainer.num_generations=2,4"])  # -m decides
    for argv in (["+sweep=frontier"], ["experiment=open_r1_demo"], ["hydra.mode=MULTIRUN"], ["--config-dir", "/x"]):
        assert overrides.mode_needs_compose(argv), argv
    # a number no float holds is named by the pre-scan; a bare OverflowError from elsewhere still reads as one
    assert "too large for a number" in errors.explain(OverflowError("int too large to convert to float"))
