"""model=auto and grpo-exp model-info: any causal LM's numbers from its config.json."""

import json

import pytest
from omegaconf import OmegaConf

from grpo_exp.models import model_info, model_option
from tests.helpers import compose_cfg, problem_keys, problems


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
    assert model_option.main([str(saved_models["mistral"]), "--name", "my-mistral", "--out", str(tmp_path)]) == 0
    written = OmegaConf.load(tmp_path / "my-mistral.yaml")
    cfg = compose_cfg("model=auto", f"model.name_or_path={saved_models['mistral']}")
    model_info.complete(cfg.model)
    for key in (*model_info.ARCH_KEYS, "model_type", "num_parameters"):
        assert written[key] == cfg.model[key], key


def test_a_mixture_of_experts_with_sliding_windows_is_read_not_called_unmodelled(tmp_path):
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
    assert "not modelled" not in notes and "planned as full attention" not in notes  # planned: model_families.py
    assert (arch["num_experts"], arch["sliding_window"], arch["layer_types"]) == (8, 4096, ["sliding_attention"] * 2)
    qwen2_window = model_info.model_families.numbers({**config, "max_window_layers": 1})  # Qwen2's: from layer 1 on
    assert qwen2_window["layer_types"] == ["full_attention", "sliding_attention"]
    # counted exactly on the meta device (the class TRL loads)
    assert "estimated" not in notes and arch["num_parameters"] > 0
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
    found = problems("model=auto", f"model.name_or_path={tmp_path}")
    assert problem_keys(found) == ["model.name_or_path"] and message in found[0].why


def test_model_auto_without_config_json(tmp_path):
    found = problems("model=auto", f"model.name_or_path={tmp_path}")
    assert problem_keys(found) == ["model.name_or_path"] and "no config.json" in found[0].why


def test_lora_targets_checked_against_the_real_layers(saved_models):
    found = problems(
        "model=auto",
        f"model.name_or_path={saved_models['gemma']}",
        "peft=lora",
        "peft.target_modules=[q_proj,qkv_proj]",
    )
    assert problem_keys(found) == ["peft.target_modules"] and "['qkv_proj']" in found[0].why
