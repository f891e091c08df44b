"""A user's recipe carries over: `grpo-exp recipe` turns TRL / open-r1 recipes (with their
accelerate or DeepSpeed configs) into Hydra experiments that compose, check and plan with the same
meaning; fields with no home are refused by name unless skipped. In-process (no training)."""

import json
import uuid
from pathlib import Path

import pytest
import yaml

from grpo_exp import recipe
from tests.helpers import CONF, compose_cfg, fast_lane, planned

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


def plan_of(name: str, *overrides: str):
    """(config, memory plan) of experiment=<name>, which must pass every check."""
    found = planned(f"experiment={name}", *overrides)
    return found.cfg, found.memory


def test_open_r1_recipe_with_zero3_accelerate_plans_with_the_same_meaning(importer, local_model, math_parquet):
    code, name = importer(open_r1_recipe(local_model, math_parquet), ZERO3_ACCELERATE)
    assert code == 0
    cfg, memory = plan_of(name, "topology.gpu_memory_gib=80")
    t, v = cfg.trainer, cfg.vllm
    # the alias, at the key it resolves to
    assert t.activation_checkpointing is True and t.gradient_checkpointing is None
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
    # open-r1's defaults
    assert {k for k, node in cfg.data.rewards.items() if node is not None} == {
        "accuracy",
        "format",
        "tag_count",
    }
    assert cfg.model.hidden_size == 1536 and memory.fits  # model=auto read the local config.json
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert (
        "activation_checkpointing: true  # gradient_checkpointing" in text
        and "warmup_steps: 0.05  # warmup_ratio" in text
    )
    # the same run with checkpointing off plans far more activation memory: the recipe's value was not dropped
    _, without = plan_of(name, "topology.gpu_memory_gib=80", "trainer.activation_checkpointing=false")
    assert without.train["components_gib"]["activations"] > 5 * memory.train["components_gib"]["activations"]


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
        "report_to": ["comet_ml"],
        "no_such_field": 1,
    }
    code, name = importer(fields)
    err = capsys.readouterr().err
    assert code == 2 and not (CONF / "experiment" / f"{name}.yaml").exists()
    for field in ("load_in_4bit", "reward_funcs: cosine", "report_to", "no_such_field"):
        assert f"  {field}:" in err, err
    assert "--skip load_in_4bit" in err and "--skip cosine to leave that reward out" in err
    code, name = importer(fields, None, None, "load_in_4bit", "reward_funcs", "report_to", "no_such_field")
    assert code == 0
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert "# skipped (--skip): load_in_4bit: true" in text and '# skipped (--skip): reward_funcs: ["cosine"]' in text


OPEN_R1_RECIPE = {  # as open-r1's recipes write them: an inline template, a reward with no home, its weights,
    "model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct",  # TRL 2.0's renamed fields, its reward arguments
    "dataset_name": "open-r1/OpenR1-Math-220k",
    "chat_template": "{% for m in messages %}{{ '<|' + m['role'] + '|>\n' + m['content'] + '\n' }}{% endfor %}",
    "reward_funcs": ["accuracy", "format", "soft_overlong_punishment"],
    "reward_weights": [1.0, 0.5, 0.25],
    "use_liger_kernel": True,
    "vllm_importance_sampling_cap": 2.0,
    "use_transformers_paged": False,
    "cosine_max_len": 1000,
    "repetition_n_grams": 3,
    "use_vllm": False,
}


def test_an_open_r1_recipe_imports_after_its_own_fix_lines_and_plans(importer, capsys):
    """What the importer accepts always plans: a reward without a home is left out by its name, its weight with it;
    chat_template and TRL 2.0's renamed fields carry over, under their successors; reward arguments of rewards the
    recipe does not use are no-ops, noted."""
    code, name = importer(OPEN_R1_RECIPE)
    err = capsys.readouterr().err
    assert code == 2 and err.count("fix: ") == 1  # only the reward without a home
    code, name = importer(OPEN_R1_RECIPE, None, None, "soft_overlong_punishment")
    assert code == 0, capsys.readouterr().err
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert "m['role']" in text and "use_kernels: true  # use_liger_kernel" in text
    assert "TRL 2.0 removes this name" in text and "# ignored (no effect on the run): cosine_max_len" in text
    cfg, _ = plan_of(name)  # composes, passes every check, plans
    assert cfg.model.chat_template == OPEN_R1_RECIPE["chat_template"]
    assert list(cfg.trainer.reward_weights) == [1.0, 0.5] and cfg.vllm.importance_sampling_clip_max == 2.0
    assert cfg.trainer.model_init_kwargs.use_kernels is True and cfg.trainer.use_liger_kernel is False
    code, name = importer(OPEN_R1_RECIPE, None, None, "reward_funcs")  # all left out: the weights go too
    assert code == 0 and "# skipped (--skip): reward_weights" in (CONF / "experiment" / f"{name}.yaml").read_text()
    code, _ = importer({**OPEN_R1_RECIPE, "reward_funcs": ["accuracy"]}, None, None)
    assert code == 2 and "3 weights for the 1 rewards the experiment keeps" in capsys.readouterr().err


def test_the_chat_template_reaches_the_tokenizer(tmp_path):
    from grpo_exp.training import build

    template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    cfg = compose_cfg(f"+model.chat_template={json.dumps(template)}")
    tok = build.tokenizer(cfg, build.model_path(cfg))
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<user>hi"


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
    cfg, memory = plan_of(name, "topology=1x8")
    assert cfg.deepspeed.zero_optimization.stage == 2 and cfg.deepspeed.zero_optimization.overlap_comm is True
    # overlap: two buckets
    assert memory.train["components_gib"]["deepspeed_buffers"] == pytest.approx(2 * 5e8 * 2 / 2**30)


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
    cfg, memory = plan_of("open_r1_demo")
    assert cfg.model.name == "qwen7b" and cfg.deepspeed.zero_optimization.stage == 2 and memory.fits


def test_a_recipe_that_cannot_be_read_is_refused(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("- just\n- a list\n")
    assert recipe.main([str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "not a mapping" in capsys.readouterr().err


# --- recipes as their authors published them (TRL 0.14 - 1.x forms) ---------------------------------------

QWEN_05B = {  # Qwen2.5-0.5B-Instruct's config.json, for model=auto beside a shipped hub id
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
BASE = {
    "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
    "dataset_name": "some-user/math-data",
    "per_device_train_batch_size": 8,
    "num_generations": 8,
    "max_completion_length": 256,
    "learning_rate": 1.0e-06,
}
ZERO2_3PROC = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "DEEPSPEED",
    "deepspeed_config": {"zero_stage": 2},
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 3,
}


def placed(name: str, *overrides: str):
    """(config, launch plan) of experiment=<name> on 24 GiB GPUs, which must pass every check."""
    found = planned(f"experiment={name}", "topology.gpu_memory_gib=24", *overrides)
    return found.cfg, found.plan


def test_use_vllm_false_composes_as_the_off_option(importer):
    """YAML reads an unquoted `off` as false: the group option is written quoted."""
    code, name = importer({**BASE, "use_vllm": False}, ZERO2_3PROC)
    assert code == 0
    assert "override /vllm: 'off'" in (CONF / "experiment" / f"{name}.yaml").read_text()
    cfg, plan = placed(name)
    assert cfg.vllm.mode == "off" and plan.world_size == 3


@pytest.mark.parametrize("device", ["auto", "cuda:3", "cuda:7"])
def test_trl_016_vllm_device_is_one_reserved_gpu_beside_the_trainers(importer, device):
    """TRL <= 0.16 ran vLLM on a GPU of its own next to accelerate's num_processes trainers: the node had
    trainers + 1 GPUs. grpo_exp's layout for that is vllm=server with one reserved GPU."""
    code, name = importer(
        {**BASE, "use_vllm": True, "vllm_device": device, "vllm_gpu_memory_utilization": 0.7}, ZERO2_3PROC
    )
    assert code == 0
    cfg, plan = placed(name)
    assert (plan.world_size, plan.vllm["mode"], plan.vllm["gpus"]) == (3, "server", 1)
    assert (cfg.topology.gpus_per_node, cfg.vllm.gpu_memory_utilization) == (4, 0.7)


def test_a_vllm_device_among_the_training_gpus_is_refused_by_name(importer, capsys):
    code, name = importer({**BASE, "use_vllm": True, "vllm_device": "cuda:1"}, ZERO2_3PROC)
    err = capsys.readouterr().err
    assert code == 2 and "vllm_device: cuda:1 is one of the 3 training GPUs" in err, err
    assert not (CONF / "experiment" / f"{name}.yaml").exists()


def test_vllm_device_without_use_vllm_is_ignored_as_trl_ignored_it(importer):
    code, name = importer({**BASE, "use_vllm": False, "vllm_device": "auto"}, ZERO2_3PROC)
    assert code == 0
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert '# ignored (no effect on the run): vllm_device: "auto": use_vllm is false' in text


def test_the_launch_commands_num_processes_wins_over_the_file_and_is_named(importer, tmp_path, capsys):
    """`accelerate launch --num_processes 2` overrides the file's 3; a server run's vLLM GPUs come on top;
    on several machines every node keeps the recipe's trainers (symmetric)."""
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({**BASE, "use_vllm": True, "vllm_mode": "server"}))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(ZERO2_3PROC))
    out = tmp_path / "conf" / "experiment" / "launched.yaml"
    assert (
        recipe.main(
            [
                str(tmp_path / "r.yaml"),
                "--accelerate",
                str(tmp_path / "a.yaml"),
                "--num-processes",
                "4",
                "--num-machines",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    said = capsys.readouterr().out
    assert "--num-processes 4, --num-machines 2; the accelerate file said 3" in said, said
    exp = yaml.safe_load(out.read_text())
    assert exp["topology"] == {"symmetric": True, "nnodes": 2, "gpus_per_node": 3}  # 2 trainers + 1 vLLM GPU
    assert recipe.main([str(tmp_path / "r.yaml"), "--num-processes", "x", "--out", str(out)]) == 2


@pytest.mark.parametrize(
    "fields,split",
    [
        ({"eval_strategy": "steps", "eval_steps": 10}, "test"),  # TRL's default dataset_test_split
        ({"eval_strategy": "epoch", "dataset_test_split": "validation"}, "validation"),
    ],
)
def test_evaluation_keeps_the_split_trls_scripts_evaluate_on(importer, fields, split):
    code, name = importer({**BASE, "use_vllm": False, **fields}, ZERO2_3PROC)
    assert code == 0
    cfg, _ = placed(name)
    assert cfg.data.eval_split == split and cfg.trainer.eval_strategy == fields["eval_strategy"]


def test_do_eval_without_an_eval_strategy_evaluates_nothing_and_is_accepted(importer):
    """open-r1-era recipes say `do_eval: true` beside `eval_strategy: "no"`: Trainer evaluates on
    eval_strategy alone, TRL's script loads no eval split, and neither does the import."""
    code, name = importer({**BASE, "do_eval": True, "eval_strategy": "no", "dataset_test_split": "test"})
    assert code == 0
    cfg, _ = placed(name)
    assert cfg.data.eval_split is None and cfg.trainer.do_eval is True


def test_yaml_booleans_given_for_words_are_the_words_meant(importer):
    """`eval_strategy: no` unquoted reads as false in YAML 1.1; `save_strategy: no` likewise."""
    code, name = importer({**BASE, "eval_strategy": False, "save_strategy": False})
    assert code == 0
    cfg, _ = placed(name)
    assert (cfg.trainer.eval_strategy, cfg.trainer.save_strategy) == ("no", "no")


def test_lora_on_embeddings_is_peft_lora_and_planned(importer, tmp_path):
    """PEFT's LoRA adapts nn.Embedding too: embed_tokens is accepted and its adapter (r x (vocab + hidden))
    is planned."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN_05B))
    fields = {**BASE, "use_peft": True, "lora_r": 16, "lora_alpha": 32}
    code, name = importer({**fields, "lora_target_modules": ["q_proj", "v_proj", "embed_tokens"]})
    assert code == 0
    _, without = plan_of(name, f"model.name_or_path={model}", "model=auto", "peft.target_modules=[q_proj,v_proj]")
    cfg, with_embed = plan_of(name, f"model.name_or_path={model}", "model=auto")
    extra = with_embed.train["components_gib"]["weights"] - without.train["components_gib"]["weights"]
    assert extra * 2**30 == pytest.approx(16 * (151936 + 896) * 4)  # fp32 adapter weights
    assert list(cfg.peft.target_modules) == ["q_proj", "v_proj", "embed_tokens"]


def test_fields_trls_parser_ignored_are_noted_not_refused(importer, capsys):
    """Early open-r1 recipes carried dataset_configs and num_processes; TRL's parser ignored them then and
    `trl grpo` ignores unknown fields now. What would change the run is still refused."""
    fields = {
        **BASE,
        "dataset_configs": ["all"],
        "num_processes": 7,
        "overwrite_output_dir": True,
        "vllm_dtype": "auto",
        "dataset_streaming": False,
        "lora_task_type": "CAUSAL_LM",
    }
    code, name = importer(fields)
    out = capsys.readouterr().out
    assert code == 0
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    for field in (
        "dataset_configs",
        "num_processes",
        "overwrite_output_dir",
        "vllm_dtype",
        "dataset_streaming",
        "lora_task_type",
    ):
        assert f"# ignored (no effect on the run): {field}:" in text and f"ignored, as TRL ignores it: {field}" in out
    code, _ = importer({**BASE, "dataset_streaming": True, "reward_model_name_or_path": "org/rm"})
    err = capsys.readouterr().err
    assert code == 2 and "  dataset_streaming:" in err and "  reward_model_name_or_path:" in err


def test_a_value_that_does_not_compose_is_refused_by_its_field_and_nothing_is_written(importer, capsys):
    code, name = importer(
        {
            **BASE,
            "num_generations": "eight",
            "temperature": [1, 2],
            "use_vllm": "yes",
            "lora_target_modules": 5,
            "reward_funcs": 3,
        }
    )
    err = capsys.readouterr().err
    assert code == 2 and not (CONF / "experiment" / f"{name}.yaml").exists()
    for field in (
        "num_generations: 'eight' at trainer.num_generations",
        "temperature: [1, 2] at trainer.temperature",
        "use_vllm: 'yes': true or false",
        "lora_target_modules: 5",
        "reward_funcs: 3",
    ):
        assert f"  {field}" in err, err
    assert "Traceback" not in err


# TRL's GRPO recipe forms over its releases, as public recipes wrote them (fields and launch).
RELEASE_FORMS = {
    "trl-0.14 (vLLM on its own GPU)": (
        {
            "use_vllm": True,
            "vllm_device": "auto",
            "vllm_gpu_memory_utilization": 0.7,
            "vllm_dtype": "bf16",
            "dataset_configs": ["all"],
            "num_processes": 3,
            "max_prompt_length": 512,
            "bf16": True,
        },
        ZERO2_3PROC,
        (3, "server", 4),
    ),
    "trl-0.16 (scale_rewards, loss_type)": (
        {
            "use_vllm": True,
            "vllm_device": "cuda:3",
            "vllm_max_model_len": 1024,
            "scale_rewards": False,
            "num_iterations": 2,
            "epsilon_high": 0.28,
            "loss_type": "bnpo",
            "log_completions": True,
            "do_eval": True,
            "eval_strategy": "no",
            "overwrite_output_dir": True,
            "report_to": ["wandb"],
        },
        ZERO2_3PROC,
        (3, "server", 4),
    ),
    "trl-0.17 (trl vllm-serve)": (
        {
            "use_vllm": True,
            "vllm_server_host": "127.0.0.1",
            "vllm_server_port": 8000,
            "vllm_server_timeout": 240,
            "use_liger_loss": False,
            "mask_truncated_completions": True,
            "vllm_mode": "server",
        },
        {**ZERO2_3PROC, "num_processes": 7},
        (7, "server", 8),
    ),
    "trl-0.18 (colocate)": (
        {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.3,
            "vllm_tensor_parallel_size": 1,
            "steps_per_generation": 2,
            "gradient_checkpointing": True,
            "eval_strategy": "steps",
            "eval_steps": 50,
            "per_device_eval_batch_size": 8,
        },
        {**ZERO2_3PROC, "num_processes": 4},
        (4, "colocate", 4),
    ),
    "trl-1.x (dataset mixture)": (
        {
            "datasets": [{"path": "trl-lib/DeepMath-103K", "split": "train"}],
            "dtype": "bfloat16",
            "use_vllm": False,
            "report_to": "none",
        },
        None,
        (None, "off", None),
    ),
}


@pytest.mark.parametrize("form", fast_lane(list(RELEASE_FORMS), lambda f: f == list(RELEASE_FORMS)[-1]))
def test_recipes_of_every_trl_release_import_and_plan(importer, form):
    fields, accelerate, (world, mode, gpus_per_node) = RELEASE_FORMS[form]
    code, name = importer({**BASE, **fields}, accelerate)
    assert code == 0
    cfg, plan = placed(name)
    assert cfg.vllm.mode == mode
    if world is not None:
        assert (plan.world_size, cfg.topology.gpus_per_node) == (world, gpus_per_node)


# --- accelerate's FSDP configs (TRL ships fsdp1.yaml and fsdp2.yaml) -----------------------------------------


def _trl_accelerate_config(name: str) -> dict:
    import importlib.util

    folder = Path(importlib.util.find_spec("trl").origin).parent / "accelerate_configs"
    return yaml.safe_load((folder / f"{name}.yaml").read_text())


@pytest.mark.parametrize("preset", ["fsdp2", "fsdp1"])
def test_trls_fsdp_presets_import_into_the_fsdp_group_and_plan(importer, preset):
    """TRL's own presets, byte for byte: FSDP2 as it is; FSDP1 (FULL_SHARD) as FSDP2 with the same sharding, said
    in a note; FSDP1-only settings ignored by name; DeepSpeed off."""
    code, name = importer(BASE, _trl_accelerate_config(preset))
    assert code == 0
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert "override /fsdp: full_shard" in text and "override /deepspeed: none" in text
    assert ("imported as FSDP2" in text) == (preset == "fsdp1")
    assert ("fsdp_backward_prefetch" in text) == (preset == "fsdp1")
    cfg, plan = placed(name)
    assert cfg.fsdp.enabled and cfg.fsdp.cpu_ram_efficient_loading and not cfg.deepspeed and plan.world_size == 8


@pytest.mark.slow  # nine imports and plans: the presets above keep the fsdp import in make test-fast
@pytest.mark.parametrize(
    ("settings", "option", "reshard"),
    [
        ({"fsdp_version": 2, "fsdp_offload_params": True}, "full_shard_offload", True),
        ({"fsdp_version": 2, "fsdp_reshard_after_forward": False}, "full_shard", False),
        ({"fsdp_sharding_strategy": "HYBRID_SHARD"}, "hybrid_shard", True),
        ({"fsdp_sharding_strategy": 2}, "full_shard", False),  # accelerate's number for SHARD_GRAD_OP
        ({"fsdp_sharding_strategy": "NO_SHARD"}, "none", True),  # data parallel
    ],
)
def test_accelerate_fsdp_settings_map_to_the_options_that_shard_alike(importer, settings, option, reshard):
    accelerate = {"distributed_type": "FSDP", "num_machines": 1, "num_processes": 8, "fsdp_config": settings}
    code, name = importer(BASE, accelerate)
    assert code == 0
    cfg, _ = placed(name)
    assert (cfg.fsdp.name, cfg.fsdp.get("reshard_after_forward", True)) == (option, reshard)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fields", "option"),
    [
        ({"fsdp": "full_shard auto_wrap"}, "full_shard"),
        ({"fsdp": "full_shard offload auto_wrap"}, "full_shard_offload"),
        ({"fsdp": True, "fsdp_config": {"fsdp_version": 2, "cpu_offload": True}}, "full_shard_offload"),
        ({"fsdp": ["hybrid_shard"]}, "hybrid_shard"),
    ],
)
def test_a_recipes_own_fsdp_fields_become_the_fsdp_group(importer, fields, option):
    """TrainingArguments' fsdp / fsdp_config inside the recipe, as transformers 5 reads them (FSDP2 by default)."""
    code, name = importer({**BASE, **fields}, ZERO2_3PROC | {"distributed_type": "MULTI_GPU", "deepspeed_config": {}})
    assert code == 0
    cfg, _ = placed(name)
    assert cfg.fsdp.name == option and not cfg.deepspeed


def test_report_to_becomes_the_logger_and_its_companions(importer):
    """TRL's report_to: the first tracker is logger=, the others logger.also (TensorBoard and MLflow run too)."""
    from grpo_exp.trackers import installed as installed_trackers

    code, name = importer({**BASE, "report_to": ["tensorboard", "wandb"]}, ZERO2_3PROC)
    assert code == 0
    cfg, _ = placed(name)
    assert (cfg.logger.name, list(cfg.logger.also)) == ("tensorboard", ["wandb"])
    code, name = importer({**BASE, "report_to": "all"}, ZERO2_3PROC)  # transformers: every tracker installed
    assert code == 0
    cfg, _ = placed(name)
    assert [cfg.logger.name, *cfg.logger.also] == installed_trackers()
    assert importer({**BASE, "report_to": ["comet_ml"]}, ZERO2_3PROC)[0] == 2
