"""Checks before launch, in-process (no subprocess, no training): ranges and choices agree with what
TRL/transformers/torch refuse, every problem in one report, data files, any model's config.json,
DeepSpeed's own config models. tests/test_cli.py covers the exit-code contract end to end."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from grpo_exp.__main__ import check, deepspeed_override
from grpo_exp.config import deepspeed_check, errors, model_info
from grpo_exp.config.checks import reward_columns
from grpo_exp.launching import data_files as data
from tests.conftest import CONF, REPO, compose_cfg


def problems_for(*overrides: str, gpus: int = 0):
    cfg = compose_cfg(*map(deepspeed_override, overrides))  # as the CLI rewrites deepspeed.<key>=v
    return check(cfg, Path("/x"), gpus)[1]


def keys(problems) -> list[str]:
    return [p.key for p in problems]


# --- the driver and TRL in step ----------------------------------------------------------------
# Each invalid trainer value, and how the library stack refuses it when the driver does not:
# GRPOConfig's own __post_init__, or the object TRL/transformers build from it during training.
def _grpo_config(field, value):
    from trl import GRPOConfig

    GRPOConfig(output_dir="/tmp/grpo_exp_test", use_cpu=True, report_to="none", **{field: value})


def _adamw(**kwargs):
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], **kwargs)


def _warper(name, value):
    import transformers.generation.logits_process as lp

    getattr(lp, name)(value)


def _generation_config(**kwargs):
    from transformers import GenerationConfig

    GenerationConfig(**kwargs).validate(strict=True)


INVALID_TRAINER = {
    # key: (value, how the stack refuses it)
    "num_generations": (1, lambda v: _grpo_config("num_generations", v)),
    "logging_steps": (0, lambda v: _grpo_config("logging_steps", v)),
    "warmup_steps": (-1, lambda v: _grpo_config("warmup_steps", v)),
    "lr_scheduler_type": ("nope", lambda v: _grpo_config("lr_scheduler_type", v)),
    "optim": ("nope", lambda v: _grpo_config("optim", v)),
    "save_strategy": ("sometimes", lambda v: _grpo_config("save_strategy", v)),
    "auto_find_batch_size": (True, lambda v: _grpo_config("auto_find_batch_size", v)),
    "per_device_train_batch_size": (
        0,
        lambda v: torch.utils.data.DataLoader([1], batch_size=v),
    ),  # Trainer's dataloader
    "learning_rate": (-1.0, lambda v: _adamw(lr=v)),  # Trainer's AdamW
    "adam_beta1": (1.5, lambda v: _adamw(betas=(v, 0.999))),
    "weight_decay": (-1.0, lambda v: _adamw(weight_decay=v)),
    "adam_epsilon": (-1.0, lambda v: _adamw(eps=v)),
    "temperature": (-0.5, lambda v: _warper("TemperatureLogitsWarper", v)),  # generate()'s sampling
    "top_p": (1.5, lambda v: _warper("TopPLogitsWarper", v)),
    "min_p": (2.0, lambda v: _warper("MinPLogitsWarper", v)),
    "top_k": (-1, lambda v: _warper("TopKLogitsWarper", v)),
    "repetition_penalty": (0.0, lambda v: _warper("RepetitionPenaltyLogitsProcessor", v)),
    "max_completion_length": (0, lambda v: _generation_config(max_new_tokens=v)),
}
# Values GRPOConfig accepts and training survives, but that make the run meaningless; the driver is
# the only check (the reason is the test's documentation).
MEANINGLESS_TRAINER = {
    "gradient_accumulation_steps": (0, "Trainer divides the dataloader length by it"),
    "beta": (-0.04, "a negative KL coefficient rewards drifting away from the reference model"),
    "epsilon": (-0.1, "a negative clip range clips every ratio"),
    "num_iterations": (0, "no optimisation pass over a generation batch"),
    "max_steps": (0, "trains nothing (-1 means: use num_train_epochs)"),
    "save_total_limit": (0, "deletes every checkpoint"),
    "num_train_epochs": (0.0, "trains nothing"),
    "max_grad_norm": (-1.0, "a negative clipping norm"),
}


@pytest.mark.parametrize("field", INVALID_TRAINER)
def test_invalid_trainer_value_is_refused_by_trl_and_by_the_driver(field):
    value, refuse = INVALID_TRAINER[field]
    with pytest.raises((ValueError, TypeError)):
        refuse(value)
    assert f"trainer.{field}" in keys(problems_for(f"trainer.{field}={value}"))


@pytest.mark.parametrize("field", MEANINGLESS_TRAINER)
def test_meaningless_trainer_value_is_refused_by_the_driver(field):
    value, _reason = MEANINGLESS_TRAINER[field]
    assert f"trainer.{field}" in keys(problems_for(f"trainer.{field}={value}"))


ISSUE_EXAMPLES = {  # overrides -> the key the report names
    "trainer.per_device_train_batch_size=0": "trainer.per_device_train_batch_size",
    "trainer.gradient_accumulation_steps=0": "trainer.gradient_accumulation_steps",
    "trainer.max_completion_length=0": "trainer.max_completion_length",
    "trainer.learning_rate=-1": "trainer.learning_rate",
    "trainer.temperature=-0.5": "trainer.temperature",
    "data.max_prompt_length=-5": "data.max_prompt_length",
    "model=qwen7b topology=1x8 vllm=colocate vllm.gpu_memory_utilization=1.5": "vllm.gpu_memory_utilization",
    "topology=1x8 topology.gpu_memory_gib=-1": "topology.gpu_memory_gib",
    "peft=lora peft.r=0": "peft.r",
    "memory.limit_gib=-1": "memory.limit_gib",
    "memory.limit_gib=1": "memory.limit_gib",  # below what a CPU worker needs to start
    "watchdog.stall_s=0": "watchdog.stall_s",
    "topology.master_port=99999": "topology.master_port",
    "trainer.sync_ref_model=true": "trainer.sync_ref_model",  # TRL: nothing to sync with beta 0
    "trainer.loss_type=nope": "trainer.loss_type",
    "trainer.scale_rewards=nope": "trainer.scale_rewards",
    "trainer.lr_scheduler_kwargs=5": "trainer.lr_scheduler_kwargs",
    "trainer.eval_strategy=steps": "trainer.eval_strategy",
    "peft=lora peft.target_modules=[q_proj,lm_head]": "peft.target_modules",
    "vllm=colocate vllm.importance_sampling_clip_min=5": "vllm.importance_sampling_clip_min",
}


@pytest.mark.parametrize("overrides", ISSUE_EXAMPLES)
def test_invalid_example_is_named(overrides):
    assert ISSUE_EXAMPLES[overrides] in keys(problems_for(*overrides.split()))


def test_valid_extras_pass():
    assert (
        problems_for(
            "trainer.beta=0.04",
            "trainer.sync_ref_model=true",
            "trainer.epsilon_high=0.28",
            "trainer.min_p=0.05",
            "trainer.save_total_limit=2",
        )
        == []
    )


def test_batch_rule_is_reported_beside_other_problems():
    found = keys(problems_for("trainer.num_generations=3", "trainer.temperature=0"))
    assert found == ["trainer.temperature", "trainer.num_generations"]


def test_batch_rule_skipped_when_its_inputs_are_invalid():
    assert keys(problems_for("trainer.per_device_train_batch_size=0", "trainer.num_generations=3")) == [
        "trainer.per_device_train_batch_size"
    ]


# --- unknown and owned keys (Hydra's errors, explained) -------------------------------------------


@pytest.mark.parametrize(
    "override,expected",
    [
        ("trainer.epsilon_hi=0.3", "did you mean trainer.epsilon_high"),
        ("trainer.save_total_limt=2", "did you mean trainer.save_total_limit"),
        ("trainer.output_dir=/x", "use the run dir (hydra.run.dir)"),
        ("trainer.seed=1", "use seed (top level)"),
        ("trainer.hub_token=abc", "HF_TOKEN environment variable"),
        ("trainer.vllm_gpu_memory_utilization=0.5", "use vllm.gpu_memory_utilization"),
        ("vllm.server_base_url=http://x", "vllm.server_host and vllm.server_port"),
        ("topology.nnode=2", "did you mean topology.nnodes"),
    ],
)
def test_unknown_key_says_what_to_use(override, expected):
    from hydra.errors import HydraException

    with pytest.raises(HydraException) as caught:
        compose_cfg(override)
    assert expected in errors.explain(caught.value)


# --- data preflight ------------------------------------------------------------------------------

ROWS = [{"question": f"What is {a} + {a}?", "solution": str(2 * a), "level": a % 3} for a in range(8)]


def data_cfg(path, **extra) -> "OmegaConf":
    return compose_cfg("data=hf", f"data.path={path}", *[f"data.{k}={v}" for k, v in extra.items()])


def data_problems(path, **extra):
    cfg = data_cfg(path, **extra)
    return data.preflight(cfg.data, reward_columns(cfg))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from datasets import Dataset, DatasetDict

    root = tmp_path_factory.mktemp("data")
    ds = Dataset.from_list(ROWS)
    ds.to_parquet(root / "d.parquet")
    ds.to_csv(root / "d.csv", index=False)
    ds.to_json(root / "d.jsonl")
    (root / "d.json").write_text(json.dumps(ROWS))
    ds.save_to_disk(root / "saved")
    DatasetDict({"train": ds, "test": ds}).save_to_disk(root / "saved_dict")
    return root


@pytest.mark.parametrize("name", ["d.parquet", "d.csv", "d.jsonl", "d.json", "saved", "saved_dict"])
def test_every_format_with_renamed_columns_passes(files, name):
    assert data_problems(files / name, prompt_column="question", answer_column="solution") == []


@pytest.mark.parametrize("name", ["d.parquet", "d.csv", "d.jsonl", "saved"])
def test_missing_columns_are_named_per_format(files, name):
    found = data_problems(files / name)  # default columns: prompt, answer
    assert keys(found) == ["data.prompt_column", "data.answer_column"]
    assert (
        "question" in found[0].fix
        and "data.rewards.correctness, data.rewards.answer_closeness need the reference answers" in found[1].why
    )


def test_extra_column_a_reward_needs(files, monkeypatch):
    cfg = compose_cfg(
        "data=hf",
        f"data.path={files / 'd.parquet'}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "+data.rewards.probe._target_=tests.memory_hog.record_columns",
    )
    assert reward_columns(cfg)["probe"] == ["level"]  # a required argument TRL does not supply
    assert data.preflight(cfg.data, reward_columns(cfg)) == []
    cfg = compose_cfg(
        "data=hf",
        f"data.path={files / 'd.parquet'}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "+data.rewards.probe._target_=tests.memory_hog.record_columns",
        "+data.rewards.probe.level=1",
    )
    assert reward_columns(cfg)["probe"] == []  # bound in the config


@pytest.mark.parametrize("name", ["d.parquet", "d.csv", "d.jsonl", "d.json", "saved", "saved_dict"])
def test_rows_are_counted_per_format(files, name):
    cfg = data_cfg(files / name, prompt_column="question", answer_column="solution")
    assert data.preflight(cfg.data, reward_columns(cfg), prompts_per_batch=len(ROWS)) == []
    found = data.preflight(cfg.data, reward_columns(cfg), prompts_per_batch=len(ROWS) + 1)
    assert (
        keys(found) == ["data.path"]
        and f"holds {len(ROWS)} prompts, too few" in found[0].why
        and "0 steps" in found[0].why
    )


def test_too_few_prompts_for_one_generation_batch_are_refused(files):
    # 2 ranks x per_device_train_batch_size 8 x steps_per_generation 1 = 16 completions = 8 prompts x 2 generations
    batch = (
        "trainer.per_device_train_batch_size=8",
        "trainer.gradient_accumulation_steps=1",
        "trainer.num_generations=2",
    )
    small = ("data=hf", f"data.path={files / 'd.jsonl'}", "data.prompt_column=question", "data.answer_column=solution")
    assert problems_for(*small, *batch) == []  # 8 rows: exactly one batch
    found = problems_for(*small, *batch, "trainer.per_device_train_batch_size=16")
    assert keys(found) == ["data.path"] and "one generation batch takes 16 distinct prompts" in found[0].why
    found = problems_for(*small, *batch, "data.num_samples=5")
    assert keys(found) == ["data.num_samples"] and "data.num_samples=8 or more" in found[0].fix
    assert keys(problems_for(*batch, "data.num_samples=7")) == ["data.num_samples"]  # toy_math: the same rule
    assert keys(problems_for(*batch, "data.num_samples=0")) == ["data.num_samples"]  # reported once, as out of range
    assert (
        problems_for(*small, *batch, "trainer.per_device_train_batch_size=16", "action=plan") == []
    )  # a plan trains nothing


def test_missing_split_of_a_saved_dataset_dict(files):
    assert keys(
        data_problems(files / "saved_dict", split="validation", prompt_column="question", answer_column="solution")
    ) == ["data.split"]


def test_broken_files(tmp_path):
    (tmp_path / "bad.jsonl").write_text(
        '{"prompt": "a", "answer": "1"}\n{"prompt": \n\n{"prompt": "b", "answer": "2"}\n[1]\n'
    )
    found = data_problems(tmp_path / "bad.jsonl")
    assert [p.why.split(" (")[0] for p in found] == [f"{tmp_path / 'bad.jsonl'} line 2 is not valid JSON"]
    (tmp_path / "arr.jsonl").write_text('{"prompt": "a", "answer": "1"}\n[1]\n')
    assert "line 2 is not a JSON object" in data_problems(tmp_path / "arr.jsonl")[0].why
    (tmp_path / "partial.jsonl").write_text('{"prompt": "a", "answer": "1"}\n{"answer": "2"}\n')
    assert "missing from 1 row(s)" in data_problems(tmp_path / "partial.jsonl")[0].why
    (tmp_path / "empty.csv").write_text("prompt,answer\n")
    assert "holds no rows" in data_problems(tmp_path / "empty.csv")[0].why
    (tmp_path / "ragged.csv").write_text("prompt,answer\nwhat,1\nwhat,1,extra\n")
    assert "line 3 has 3 fields" in data_problems(tmp_path / "ragged.csv")[0].why
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    assert "not a readable parquet file" in data_problems(tmp_path / "junk.parquet")[0].why
    (tmp_path / "x.txt").write_text("hello")
    assert "not a format grpo_exp reads" in data_problems(tmp_path / "x.txt")[0].why
    assert "does not exist" in data_problems(tmp_path / "missing.parquet")[0].why


def test_answer_rename_would_clobber_a_column(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "answer": "1", "solution": "1"}\n')
    assert "would replace the existing 'answer'" in data_problems(tmp_path / "d.jsonl", answer_column="solution")[0].why


def test_toy_math_satisfies_the_default_rewards():
    cfg = compose_cfg()
    assert data.preflight(cfg.data, reward_columns(cfg)) == []


# --- any model --------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["mistral", "gemma"])
def test_model_auto_reads_config_json_with_an_exact_parameter_count(saved_models, family):
    from transformers import AutoModelForCausalLM

    cfg = compose_cfg("model=auto", f"model.name_or_path={saved_models[family]}")
    assert model_info.complete(cfg.model) == []
    m = cfg.model
    assert (m.name, m.model_type, m.dtype) == (family, family, "float32")
    assert (m.hidden_size, m.num_hidden_layers, m.num_key_value_heads, m.head_dim) == (64, 2, 2, 16)
    real = AutoModelForCausalLM.from_pretrained(saved_models[family])
    assert m.num_parameters == sum(p.numel() for p in real.parameters())
    assert m.tie_word_embeddings == (real.get_output_embeddings().weight is real.get_input_embeddings().weight)
    assert set(model_info.lora_layer_names(m)) >= {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "embed_tokens",  # PEFT adapts embeddings too
    }


def test_model_info_writes_a_named_option(saved_models, tmp_path):
    assert model_info.main([str(saved_models["mistral"]), "--name", "my-mistral", "--out", str(tmp_path)]) == 0
    written = OmegaConf.load(tmp_path / "my-mistral.yaml")
    cfg = compose_cfg("model=auto", f"model.name_or_path={saved_models['mistral']}")
    model_info.complete(cfg.model)
    for key in (*model_info.ARCH_KEYS, "model_type", "num_parameters"):
        assert written[key] == cfg.model[key], key


def test_unmodelled_features_become_plan_notes(tmp_path):
    config = {
        "model_type": "qwen2_moe",
        "architectures": ["Qwen2MoeForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "num_experts": 8,
        "sliding_window": 4096,
        "use_sliding_window": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    arch = model_info.read_architecture(tmp_path / "config.json")
    notes = " ".join(arch["planner_notes"])
    assert "mixture of experts" in notes and "sliding-window" in notes
    assert (
        "estimated" not in notes and arch["num_parameters"] > 0
    )  # counted exactly on the meta device (the class TRL loads)
    assert arch["num_key_value_heads"] == 4 and arch["head_dim"] == 16


@pytest.mark.parametrize(
    "config,message",
    [
        ({"model_type": "t5", "is_encoder_decoder": True}, "encoder-decoder"),
        ({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 8}, "no causal LM head"),
        ({"model_type": "x", "architectures": ["XForCausalLM"]}, "lacks"),
    ],
)
def test_models_grpo_cannot_train_are_refused(tmp_path, config, message):
    (tmp_path / "config.json").write_text(json.dumps(config))
    found = problems_for("model=auto", f"model.name_or_path={tmp_path}")
    assert keys(found) == ["model.name_or_path"] and message in found[0].why


def test_model_auto_without_config_json(tmp_path):
    found = problems_for("model=auto", f"model.name_or_path={tmp_path}")
    assert keys(found) == ["model.name_or_path"] and "no config.json" in found[0].why


def test_lora_targets_checked_against_the_real_layers(saved_models):
    found = problems_for(
        "model=auto",
        f"model.name_or_path={saved_models['gemma']}",
        "peft=lora",
        "peft.target_modules=[q_proj,qkv_proj]",
    )
    assert keys(found) == ["peft.target_modules"] and "['qkv_proj']" in found[0].why


# --- DeepSpeed's own config models --------------------------------------------------------------------


def test_shipped_deepspeed_options_pass_deepspeeds_models_and_plan_without_deepspeed():
    """The driver skips DeepSpeed's models for a shipped option's sections: this is where they are checked."""
    import subprocess
    import sys

    shipped = deepspeed_check.shipped_sections()
    assert len(shipped) == len(list((CONF / "deepspeed").glob("*.yaml"))) and any(shipped)
    for sections in shipped:
        assert deepspeed_check.model_problems(sections) == [], sections
    code = (
        "import sys; from tests.conftest import compose_cfg; from grpo_exp.config import checks; "
        "assert checks.check(compose_cfg('deepspeed=zero3_offload')) == []; print('deepspeed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip().splitlines()[-1:] == ["False"], out.stdout[-2000:] + out.stderr[-2000:]


def test_deepspeed_keys_checked_by_deepspeed():
    assert problems_for("deepspeed=zero3", "deepspeed.zero_optimization.sub_group_size=2e9") == []
    found = problems_for("deepspeed=zero3", "deepspeed.zero_optimization.sub_group_sizee=2e9")
    assert keys(found) == ["deepspeed.zero_optimization.sub_group_sizee"] and "sub_group_size" in found[0].fix
    assert keys(problems_for("deepspeed=zero2", "deepspeed.zero_optimisation.stage=3")) == [
        "deepspeed.zero_optimisation"
    ]
    assert keys(problems_for("deepspeed=zero2", "deepspeed.zero_optimization.stage=x")) == [
        "deepspeed.zero_optimization.stage"
    ]
    assert (
        deepspeed_check.problems(
            {"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}, "bf16": {"enabled": "auto"}}
        )
        == []
    )
