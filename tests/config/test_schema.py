"""Every group option composes and becomes real TRL / PEFT / DeepSpeed objects; keys map exactly."""

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo_exp.config import trl_schema
from grpo_exp.config.keys import ALIASES, OWNED_TRAINER_FIELDS
from grpo_exp.config.rewards import active_rewards
from grpo_exp.config.schema import TrainerConfig, VllmConfig
from grpo_exp.models import model_families, model_info
from tests.helpers import CONF, compose_cfg, fast_lane, group_options, script

GROUPS = [
    "model",
    "data",
    "trainer",
    "vllm",
    "deepspeed",
    "fsdp",
    "peft",
    "topology",
    "logger",
    "launcher",
    "experiment",
]
CASES = [(g, o) for g in GROUPS for o in group_options(g)]
# make test composes and builds every option; the fast lane one per group, and two models (model options differ
# only in architecture numbers, which test_model_numbers_match_transformers_parameter_count checks).
FAST_MODELS = {"tiny", "qwen7b"}
MATRIX = fast_lane(CASES, lambda c: c[1] in FAST_MODELS if c[0] == "model" else c[1] == group_options(c[0])[0])


def test_every_group_has_options():
    assert {g: len(group_options(g)) for g in GROUPS} == {
        "model": 24,
        "data": 5,
        "trainer": 1,
        "vllm": 3,
        "deepspeed": 6,
        "fsdp": 4,
        "peft": 3,
        "topology": 8,
        "logger": 6,
        "launcher": 3,
        "experiment": 1,
    }


@pytest.mark.parametrize("group,option", MATRIX, ids=[f"{g}={o}" for g, o in CASES])
def test_option_composes_and_builds(build, group, option, tmp_path, request):
    extra = (
        ["data.path=tests/fixtures/gsm8k_sample.jsonl"]
        if (group, option) in (("data", "jsonl"), ("data", "hf"))
        else []
    )
    if (group, option) == ("model", "auto"):
        extra.append(f"model.name_or_path={request.getfixturevalue('saved_models')['mistral']}")
    cfg = compose_cfg(f"{group}={option}", *extra)
    assert model_info.complete(cfg.model) == []  # model=auto: numbers from config.json
    assert not OmegaConf.missing_keys(cfg)
    args = build.grpo_config(cfg, tmp_path, use_cpu=True)
    assert args.num_generations == cfg.trainer.num_generations
    extra = cfg.trainer.model_init_kwargs
    backend = {"experts_implementation": cfg.model.experts_implementation} if cfg.model.num_experts else {}
    assert args.model_init_kwargs == {
        **(OmegaConf.to_container(extra) if extra is not None else {}),
        "dtype": cfg.model.dtype,
        **backend,  # a mixture of experts loads with the experts backend it was planned with
    }
    assert args.use_vllm == (cfg.vllm.mode != "off")
    if cfg.vllm.mode != "off":
        assert args.vllm_mode == cfg.vllm.mode
        assert args.vllm_gpu_memory_utilization == cfg.vllm.gpu_memory_utilization
    if group == "fsdp":  # transformers turned the group into accelerate's FSDP2 plugin arguments
        assert (args.fsdp_plugin_args or {}).get("fsdp_version") == (2 if option != "none" else None)
        assert (args.fsdp_plugin_args or {}).get("cpu_offload", False) == (option == "full_shard_offload")
    ds = build.deepspeed_dict(cfg)
    if option.startswith("zero"):
        assert ds["zero_optimization"]["stage"] == int(option[4])
        assert args.deepspeed == ds
    lora = build.lora_config(cfg)
    assert (lora is not None) == cfg.peft.enabled
    if lora is not None:
        assert lora.r == cfg.peft.r and set(lora.target_modules) == set(cfg.peft.target_modules)
    assert [f.__name__ for f in build.reward_funcs(cfg)] == [
        n._target_.rsplit(".", 1)[-1] for n in active_rewards(cfg.data).values()
    ]


def _grpo_fields():
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}


def test_generated_schema_matches_the_installed_trl():
    """trl_schema.py holds every GRPOConfig field with TRL's type and default; a trl upgrade that
    changes a field, type or default fails here until `python scripts/schema_gen.py` is rerun."""
    assert script("schema_gen").render() == Path(trl_schema.__file__).read_text()


def test_every_grpo_config_field_is_settable_or_owned():
    ours = {f.name for f in dataclasses.fields(TrainerConfig)} | {
        f"vllm_{f.name}" for f in dataclasses.fields(VllmConfig)
    }
    for name in _grpo_fields():
        assert name in ours or name in OWNED_TRAINER_FIELDS, f"GRPOConfig.{name} can neither be set nor is owned"
    for name in OWNED_TRAINER_FIELDS:
        assert name in _grpo_fields(), f"{name} is not a GRPOConfig field"
    assert len(_grpo_fields()) == 191  # trl 1.16: 77 GRPO fields + 114 TrainingArguments


def test_trainer_defaults_are_trls_except_the_yaml_deltas():
    """One source per default: TRL's, except what conf/trainer/grpo.yaml and the tiny model's demo shape
    (conf/model/tiny.yaml) set (each with a reason)."""
    from trl import GRPOConfig

    demo_shape = set(OmegaConf.load(CONF / "model" / "tiny.yaml").trainer)
    yaml_keys = set(OmegaConf.load(CONF / "trainer" / "grpo.yaml")) | demo_shape
    aliases = {key.split(".", 1)[1] for key in ALIASES}  # default "unset" (None): keys.resolve tells them apart
    trainer = OmegaConf.to_container(compose_cfg().trainer, resolve=True)
    for name, f in _grpo_fields().items():
        if name not in trainer or name in yaml_keys or name in aliases:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        default = getattr(default, "value", default)  # enum defaults are their string
        assert trainer[name] == default, (name, trainer[name], default)
    assert yaml_keys <= set(trainer)
    # a delta, stated in the YAML
    assert GRPOConfig.__dataclass_fields__["learning_rate"].default != trainer["learning_rate"]


def test_vllm_keys_are_grpo_config_vllm_fields_without_prefix(build):
    fields = _grpo_fields()
    own = build.VLLM_OWN_KEYS
    assert "mode" in own and "gpus" in own
    for f in dataclasses.fields(VllmConfig):
        if f.name in own:
            assert f"vllm_{f.name}" not in fields or f"vllm_{f.name}" in OWNED_TRAINER_FIELDS
        else:
            assert f"vllm_{f.name}" in fields, f"vllm.{f.name} -> vllm_{f.name} is not a GRPOConfig field"
    cfg = compose_cfg("vllm=server")
    mapped = build.vllm_fields(cfg)
    expected = {f"vllm_{k}": v for k, v in OmegaConf.to_container(cfg.vllm).items() if k not in own}
    # null = node 0
    assert mapped == {
        "use_vllm": True,
        "vllm_mode": "server",
        **expected,
        "vllm_server_host": "127.0.0.1",
    }


def test_any_grpo_config_field_reaches_grpo_config(build, tmp_path):
    cfg = compose_cfg(
        "trainer.epsilon_high=0.28",
        "trainer.min_p=0.05",
        "trainer.save_total_limit=2",
        "trainer.lr_scheduler_kwargs={num_cycles:2}",
        "trainer.generation_kwargs={stop:[x]}",
        "trainer.beta=0.04",
        "trainer.sync_ref_model=true",
        "vllm=colocate",
        "vllm.importance_sampling_clip_max=2.5",
        "trainer.model_init_kwargs={attn_implementation:eager}",
    )
    args = build.grpo_config(cfg, tmp_path, use_cpu=True)
    assert (args.epsilon_high, args.min_p, args.save_total_limit, args.sync_ref_model) == (0.28, 0.05, 2, True)
    assert args.lr_scheduler_kwargs == {"num_cycles": 2} and args.generation_kwargs == {"stop": ["x"]}
    assert args.vllm_importance_sampling_clip_max == 2.5
    assert args.model_init_kwargs == {"attn_implementation": "eager", "dtype": "float32"}  # model.dtype owns dtype


def test_lora_keys_are_lora_config_fields():
    import inspect

    from peft import LoraConfig

    params = inspect.signature(LoraConfig).parameters
    for key in compose_cfg("peft=lora").peft:
        assert key == "enabled" or key in params


def test_bf16_follows_model_dtype():
    assert compose_cfg().trainer.bf16 is False  # tiny: float32
    assert compose_cfg("model=qwen7b").trainer.bf16 is True


@pytest.mark.parametrize(
    "option",  # the fast lane: one dense model, one mixture of experts
    fast_lane(
        [o for o in group_options("model") if o not in ("tiny", "auto")],
        lambda o: o in ("qwen7b", "qwen3-30b-a3b"),
    ),
)
def test_model_numbers_match_transformers_parameter_count(option):
    """The architecture numbers in conf/model (a family's too: experts, layer types) reproduce the model's exact
    parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    m = compose_cfg(f"model={option}").model
    arch = {k: m[k] for k in model_info.ARCH_KEYS}
    config = AutoConfig.for_model(m.model_type, **arch, **model_families.hf_kwargs(m))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == m.num_parameters
    assert m.name == option and (m.name_or_path is None) == option.startswith("tiny-")
    assert option.startswith("tiny-") or "/" in m.name_or_path


def test_tiny_model_count_matches_yaml(build, model_cache, monkeypatch):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(model_cache))
    from transformers import AutoModelForCausalLM

    cfg = compose_cfg()
    model = AutoModelForCausalLM.from_pretrained(build.model_path(cfg))
    assert sum(p.numel() for p in model.parameters()) == cfg.model.num_parameters


def test_sweep_preset_is_a_multirun_grid():
    cfg = compose_cfg("+sweep=batch_x_generations", hydra_config=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert dict(cfg.hydra.sweeper.params) == {
        "trainer.per_device_train_batch_size": "2,4,8",
        "trainer.num_generations": "2,4,8",
    }
    assert cfg.experiment == "batch_x_generations"
