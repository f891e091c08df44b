"""A user's recipe carries over: `python -m grpo_exp.recipe` turns TRL / open-r1 recipes (with their
accelerate or DeepSpeed configs) into Hydra experiments that compose, check and plan with the same
meaning; fields with no home are refused by name unless skipped. In-process (no training)."""

import json
import uuid
from pathlib import Path

import pytest
import yaml

from grpo_exp.__main__ import check
from grpo_exp.config import recipe
from grpo_exp.planning import planner
from tests.conftest import CONF, compose_cfg

ZERO3_ACCELERATE = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "DEEPSPEED",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 8,
    "deepspeed_config": {
        "deepspeed_multinode_launcher": "standard",
        "offload_optimizer_device": "none",
        "offload_param_device": "none",
        "zero3_init_flag": True,
        "zero3_save_16bit_model": True,
        "zero_stage": 3,
    },
}


@pytest.fixture
def importer(tmp_path):
    """importer(recipe dict, accelerate=None, deepspeed=None, *skip) -> (exit code, experiment name, stderr);
    the experiment is written into conf/experiment for the test and removed after."""
    written = []

    def run(fields: dict, accelerate: dict | None = None, deepspeed: dict | None = None, *skip: str, capsys=None):
        name = f"_test_{uuid.uuid4().hex[:8]}"
        (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(fields))
        args = [str(tmp_path / "recipe.yaml"), "--out", str(CONF / "experiment" / f"{name}.yaml")]
        if accelerate is not None:
            (tmp_path / "accelerate.yaml").write_text(yaml.safe_dump(accelerate))
            args += ["--accelerate", str(tmp_path / "accelerate.yaml")]
        if deepspeed is not None:
            (tmp_path / "ds.json").write_text(json.dumps(deepspeed))
            args += ["--deepspeed", str(tmp_path / "ds.json")]
        for field in skip:
            args += ["--skip", field]
        written.append(CONF / "experiment" / f"{name}.yaml")
        return recipe.main(args), name

    yield run
    for path in written:
        path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def local_model(tmp_path_factory) -> Path:
    """config.json of a Qwen2.5-1.5B-shaped model: what model=auto reads."""
    path = tmp_path_factory.mktemp("m15")
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "hidden_size": 1536,
                "intermediate_size": 8960,
                "num_hidden_layers": 28,
                "num_attention_heads": 12,
                "num_key_value_heads": 2,
                "vocab_size": 151936,
                "max_position_embeddings": 32768,
                "tie_word_embeddings": True,
                "torch_dtype": "bfloat16",
            }
        )
    )
    return path


@pytest.fixture(scope="module")
def math_parquet(tmp_path_factory) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("data") / "math.parquet"
    pq.write_table(
        pa.table({"problem": [f"What is {a} * 3?" for a in range(256)], "solution": [str(3 * a) for a in range(256)]}),
        path,
    )
    return path


def open_r1_recipe(model: Path, data: Path) -> dict:
    """open-r1's recipes/<model>/grpo/config_demo.yaml, field by field (its dataset and model local)."""
    return {
        "model_name_or_path": str(model),
        "model_revision": "main",
        "torch_dtype": "bfloat16",
        "attn_implementation": "sdpa",
        "dataset_name": str(data),
        "dataset_prompt_column": "problem",
        "system_prompt": "Reason step by step, then answer inside <answer></answer>.",
        "bf16": True,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.45,
        "gradient_accumulation_steps": 4,
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "learning_rate": 2.0e-05,
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": 0.1},
        "max_prompt_length": 384,
        "max_completion_length": 768,
        "num_generations": 8,
        "per_device_train_batch_size": 8,
        "beta": 0.02,
        "warmup_ratio": 0.05,
        "seed": 7,
        "save_strategy": "no",
        "output_dir": "data/my-run",
        "report_to": ["wandb"],
        "log_completions": True,
        "num_train_epochs": 1,
        "logging_steps": 1,
    }


def planned(name: str, *overrides: str):
    cfg = compose_cfg(f"experiment={name}", "action=plan", *overrides)
    plan, problems = check(cfg, Path("/x"), gpus=0)
    assert problems == [], "\n".join(map(str, problems))
    return cfg, planner.preflight(cfg, plan)


def test_open_r1_recipe_with_zero3_accelerate_plans_with_the_same_meaning(importer, local_model, math_parquet):
    code, name = importer(open_r1_recipe(local_model, math_parquet), ZERO3_ACCELERATE)
    assert code == 0
    cfg, memory = planned(name, "topology.gpu_memory_gib=80")
    t, v = cfg.trainer, cfg.vllm
    assert (
        t.activation_checkpointing is True and t.gradient_checkpointing is None
    )  # the alias, at the key it resolves to
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps, t.num_generations) == (8, 4, 8)
    assert (t.max_completion_length, cfg.data.max_prompt_length, t.learning_rate, t.beta, t.warmup_steps) == (
        768,
        384,
        2e-05,
        0.02,
        0.05,
    )
    assert (v.mode, v.gpu_memory_utilization, cfg.deepspeed.zero_optimization.stage) == ("colocate", 0.45, 3)
    assert (cfg.topology.nnodes, cfg.topology.gpus_per_node, cfg.model.dtype, t.bf16) == (1, 8, "bfloat16", True)
    assert (cfg.data.prompt_column, cfg.data.answer_column, cfg.seed, cfg.logger.name) == (
        "problem",
        "solution",
        7,
        "wandb",
    )
    assert {k for k, node in cfg.data.rewards.items() if node is not None} == {
        "accuracy",
        "format",
        "tag_count",
    }  # open-r1's defaults
    assert cfg.model.hidden_size == 1536 and memory["fits"]  # model=auto read the local config.json
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert (
        "activation_checkpointing: true  # gradient_checkpointing" in text
        and "warmup_steps: 0.05  # warmup_ratio" in text
    )
    # the same run with checkpointing off plans far more activation memory: the recipe's value was not dropped
    _, without = planned(name, "topology.gpu_memory_gib=80", "trainer.activation_checkpointing=false")
    assert without["train"]["components_gib"]["activations"] > 5 * memory["train"]["components_gib"]["activations"]


def test_trl_docs_recipe_with_a_shipped_model_lora_and_trl_rewards(importer):
    """`trl grpo --config` format: ModelConfig's use_peft/lora_*, TRL's reward names, a hub dataset id."""
    fields = {
        "model_name_or_path": "Qwen/Qwen2.5-7B-Instruct",
        "dtype": "bfloat16",
        "dataset_name": "trl-lib/DeepMath-103K",
        "reward_funcs": ["accuracy_reward", "think_format_reward"],
        "use_peft": True,
        "lora_r": 32,
        "lora_alpha": 64,
        "lora_target_modules": "all-linear",
        "per_device_train_batch_size": 4,
        "num_generations": 8,
        "max_completion_length": 1024,
        "learning_rate": 1.0e-05,
        "report_to": "none",
        "use_vllm": True,
        "vllm_mode": "server",
        "output_dir": "out/deepmath",
    }
    code, name = importer(
        fields, {"num_processes": 8, "num_machines": 1, "distributed_type": "MULTI_GPU", "mixed_precision": "bf16"}
    )
    assert code == 0
    cfg = compose_cfg(f"experiment={name}", "action=plan")
    assert cfg.model.name == "qwen7b" and cfg.model.num_parameters == 7615616512  # the shipped numbers: plans offline
    assert (cfg.peft.enabled, cfg.peft.r, cfg.peft.lora_alpha) == (True, 32, 64) and len(cfg.peft.target_modules) == 7
    assert {k: n._target_ for k, n in cfg.data.rewards.items() if n is not None} == {
        "accuracy_reward": "trl.rewards.accuracy_reward",
        "think_format_reward": "trl.rewards.think_format_reward",
    }
    assert (cfg.data.path, cfg.vllm.mode, cfg.logger.name, cfg.deepspeed) == (
        "trl-lib/DeepMath-103K",
        "server",
        "none",
        {},
    )


def test_fields_without_a_home_are_all_listed_and_nothing_is_written(importer, capsys):
    fields = {
        "model_name_or_path": "Qwen/Qwen2.5-7B-Instruct",
        "load_in_4bit": True,
        "reward_funcs": ["cosine"],
        "logging_dir": "tb/",
        "report_to": ["tensorboard"],
        "no_such_field": 1,
    }
    code, name = importer(fields)
    err = capsys.readouterr().err
    assert code == 2 and not (CONF / "experiment" / f"{name}.yaml").exists()
    for field in ("load_in_4bit", "reward_funcs: cosine", "logging_dir", "report_to", "no_such_field"):
        assert f"  {field}:" in err, err
    assert "--skip load_in_4bit" in err
    code, name = importer(
        fields, None, None, "load_in_4bit", "reward_funcs", "logging_dir", "report_to", "no_such_field"
    )
    assert code == 0
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert "# skipped (--skip): load_in_4bit: True" in text and "# skipped (--skip): reward_funcs: ['cosine']" in text


def test_a_deepspeed_json_becomes_the_deepspeed_group(importer):
    ds = {
        "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8},
        "bf16": {"enabled": "auto"},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
    }
    code, name = importer(
        {"model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "per_device_train_batch_size": 2}, None, ds
    )
    assert code == 0
    cfg, memory = planned(name, "topology=1x8")
    assert cfg.deepspeed.zero_optimization.stage == 2 and cfg.deepspeed.zero_optimization.overlap_comm is True
    assert memory["train"]["components_gib"]["deepspeed_buffers"] == pytest.approx(
        2 * 5e8 * 2 / 2**30
    )  # overlap: two buckets


def test_the_shipped_experiment_is_its_recipe_imported(tmp_path):
    """conf/experiment/open_r1_demo.yaml is examples/recipes/open_r1_demo.yaml + zero2.yaml imported:
    they never drift."""
    import os

    repo = CONF.parent
    os.chdir(repo)  # the header names the sources as given, relative to the repository
    out = tmp_path / "open_r1_demo.yaml"
    assert (
        recipe.main(
            ["examples/recipes/open_r1_demo.yaml", "--accelerate", "examples/recipes/zero2.yaml", "--out", str(out)]
        )
        == 0
    )
    assert out.read_text() == (CONF / "experiment" / "open_r1_demo.yaml").read_text()
    cfg, memory = planned("open_r1_demo")
    assert cfg.model.name == "qwen7b" and cfg.deepspeed.zero_optimization.stage == 2 and memory["fits"]


def test_a_recipe_that_cannot_be_read_is_refused(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("- just\n- a list\n")
    assert recipe.main([str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "not a mapping" in capsys.readouterr().err
