"""Every group option composes and becomes real TRL / PEFT / DeepSpeed objects; keys map exactly."""

import dataclasses
import types
import typing

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from grpo_exp import build
from grpo_exp.schema import TrainerConfig, VllmConfig
from tests.conftest import CONF, compose_cfg, group_options

GROUPS = ["model", "data", "trainer", "vllm", "deepspeed", "peft", "topology", "logger", "launcher"]
CASES = [(g, o) for g in GROUPS for o in group_options(g)]


def test_every_group_has_options():
    assert {g: len(group_options(g)) for g in GROUPS} == {
        "model": 14, "data": 3, "trainer": 1, "vllm": 3, "deepspeed": 6, "peft": 2, "topology": 8, "logger": 2, "launcher": 2,
    }


@pytest.mark.parametrize("group,option", CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_option_composes_and_builds(group, option, tmp_path):
    extra = ["data.path=tests/fixtures/gsm8k_sample.jsonl"] if (group, option) == ("data", "jsonl") else []
    cfg = compose_cfg(f"{group}={option}", *extra)
    assert not OmegaConf.missing_keys(cfg)
    args = build.grpo_config(cfg, tmp_path, use_cpu=True)
    assert args.num_generations == cfg.trainer.num_generations
    assert args.model_init_kwargs == {"dtype": cfg.model.dtype}
    assert args.use_vllm == (cfg.vllm.mode != "off")
    if cfg.vllm.mode != "off":
        assert args.vllm_mode == cfg.vllm.mode
        assert args.vllm_gpu_memory_utilization == cfg.vllm.gpu_memory_utilization
    ds = build.deepspeed_dict(cfg)
    if option.startswith("zero"):
        assert ds["zero_optimization"]["stage"] == int(option[4])
        assert args.deepspeed == ds
    lora = build.lora_config(cfg)
    assert (lora is not None) == cfg.peft.enabled
    if lora is not None:
        assert lora.r == cfg.peft.r and set(lora.target_modules) == set(cfg.peft.target_modules)
    assert [f.__name__ for f in build.reward_funcs(cfg)] == list(cfg.data.rewards)


def _grpo_fields():
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig)}


def _accepts(annotation, value) -> bool:
    """Whether GRPOConfig's annotation admits a value of our schema's type."""
    if annotation is typing.Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(a, value) for a in typing.get_args(annotation))
    if value is None:
        return annotation is type(None)
    if origin is not None:
        return isinstance(value, origin)
    if annotation is float:
        return isinstance(value, (int, float))
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def test_trainer_keys_are_grpo_config_fields_verbatim():
    fields = _grpo_fields()
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    cfg = compose_cfg().trainer
    for f in dataclasses.fields(TrainerConfig):
        assert f.name in fields, f"trainer.{f.name} is not a GRPOConfig field"
        value = OmegaConf.to_container(cfg, resolve=True)[f.name]
        assert _accepts(hints[f.name], value), f"trainer.{f.name}={value!r} does not fit {hints[f.name]}"


def test_vllm_keys_are_grpo_config_vllm_fields_without_prefix():
    fields = _grpo_fields()
    own = build.VLLM_OWN_KEYS
    for f in dataclasses.fields(VllmConfig):
        if f.name in own:
            assert f"vllm_{f.name}" not in fields
        else:
            assert f"vllm_{f.name}" in fields, f"vllm.{f.name} -> vllm_{f.name} is not a GRPOConfig field"
    cfg = compose_cfg("vllm=server")
    mapped = build.vllm_fields(cfg)
    expected = {f"vllm_{k}": v for k, v in OmegaConf.to_container(cfg.vllm).items() if k not in own}
    assert mapped == {"use_vllm": True, **expected, "vllm_server_host": "127.0.0.1"}  # null = node 0


def test_lora_keys_are_lora_config_fields():
    import inspect

    from peft import LoraConfig

    params = inspect.signature(LoraConfig).parameters
    for key in compose_cfg("peft=lora").peft:
        assert key == "enabled" or key in params


def test_bf16_follows_model_dtype():
    assert compose_cfg().trainer.bf16 is False  # tiny: float32
    assert compose_cfg("model=qwen7b").trainer.bf16 is True


@pytest.mark.parametrize("option", [o for o in group_options("model") if o != "tiny"])
def test_model_numbers_match_transformers_parameter_count(option):
    """The architecture numbers in conf/model reproduce the model's exact parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    m = compose_cfg(f"model={option}").model
    arch = {k: m[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                              "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings",
                              "max_position_embeddings")}
    config = AutoConfig.for_model(m.model_type, **arch)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == m.num_parameters
    assert m.name == option and "/" in m.name_or_path


def test_tiny_model_count_matches_yaml(model_cache, monkeypatch):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(model_cache))
    from transformers import AutoModelForCausalLM

    cfg = compose_cfg()
    model = AutoModelForCausalLM.from_pretrained(build.model_path(cfg))
    assert sum(p.numel() for p in model.parameters()) == cfg.model.num_parameters


def test_sweep_preset_is_a_multirun_grid():
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+sweep=batch_x_generations"], return_hydra_config=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert dict(cfg.hydra.sweeper.params) == {
        "trainer.per_device_train_batch_size": "2,4,8",
        "trainer.num_generations": "2,4,8",
    }
    assert cfg.experiment == "batch_x_generations"
