"""QLoRA, pre-quantized checkpoints, vision-language models and evaluation: planned and checked."""

import json
from pathlib import Path

import pytest

from tests.helpers import planned, report

P7 = 7615616512  # Qwen2.5-7B


QWEN7B_LINEAR = 28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944)  # q,o + k,v + gate,up,down per layer


def plan_of(*overrides: str):
    return planned(*overrides).memory


def components(*overrides: str) -> dict:
    return {k: v * 2**30 for k, v in plan_of(*overrides).train["components_gib"].items()}


def test_qlora_plans_4bit_linear_layers_with_their_constants_and_the_dequantized_copy():
    base = ("model=qwen7b", "topology=1x1", "vllm=off")
    lora, qlora = components(*base, "peft=lora"), components(*base, "peft=qlora")
    adapters = lora["weights"] - 2 * P7  # fp32 LoRA on top, the same in both
    nf4_double = 0.5 + 1 / 64 + 4 / (64 * 256)  # bytes per weight: 4 bits, 8-bit block absmax, fp32 per 256 blocks
    assert qlora["weights"] == pytest.approx(QWEN7B_LINEAR * nf4_double + (P7 - QWEN7B_LINEAR) * 2 + adapters)
    assert 0.25 <= qlora["weights"] / lora["weights"] <= 0.42
    assert qlora["dequantized_weights"] == 3584 * 18944 * 2  # the largest layer (gate/up), in bf16, one at a time
    assert lora["dequantized_weights"] == 0 and qlora["optimizer"] == lora["optimizer"]  # only the adapters train
    single = components(*base, "peft=qlora", "model.quantization.double_quant=false")
    assert single["weights"] - qlora["weights"] == pytest.approx(QWEN7B_LINEAR * (4 / 64 - 1 / 64 - 4 / (64 * 256)))
    eight = components(*base, "peft=qlora", "model.quantization.bits=8")
    assert eight["weights"] == pytest.approx(QWEN7B_LINEAR * (1 + 4 / 4096) + (P7 - QWEN7B_LINEAR) * 2 + adapters)


def test_quantized_weights_cannot_train_without_adapters():
    text, _ = report("model=qwen7b", "topology=1x1", "peft=qlora", "peft.enabled=false", "action=plan")
    assert "model.quantization: holds the base weights in 4 bits, which cannot train" in text and "peft=qlora" in text
    text, _ = report("model=qwen7b", "topology=1x1", "peft=qlora", "model.quantization.bits=3", "action=plan")
    assert "model.quantization: bitsandbytes 3-bit" in text


@pytest.fixture(scope="module")
def prequantized(tmp_path_factory) -> Path:
    """config.json of a 7B Mistral stored in bitsandbytes 4-bit (an unsloth-style *-bnb-4bit checkpoint)."""
    path = tmp_path_factory.mktemp("mistral_bnb4")
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["MistralForCausalLM"],
                "model_type": "mistral",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "vocab_size": 32768,
                "max_position_embeddings": 32768,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
                "sliding_window": None,
                "quantization_config": {
                    "quant_method": "bitsandbytes",
                    "load_in_4bit": True,
                    "bnb_4bit_quant_type": "nf4",
                    "bnb_4bit_use_double_quant": True,
                    "bnb_4bit_compute_dtype": "bfloat16",
                },
            }
        )
    )
    return path


def test_a_prequantized_checkpoint_is_planned_and_served_at_its_precision(prequantized):
    _, cfg = report("model=auto", f"model.name_or_path={prequantized}", "action=plan")
    q = cfg.model.quantization
    assert (q.method, q.bits, q.quant_type, q.double_quant, q.prequantized) == ("bitsandbytes", 4, "nf4", True, True)
    # Mistral-7B's logical count, from the meta device (not the packed storage)
    assert cfg.model.num_parameters == 7248023552
    weights = plan_of("model=auto", f"model.name_or_path={prequantized}", "topology=1x1", "vllm=off", "peft=lora")
    weights = weights.train["components_gib"]["weights"]
    assert 3.3 <= weights <= 4.6  # 16-bit: ~13.5 GiB
    served = plan_of(
        "model=auto", f"model.name_or_path={prequantized}", "topology=1x8", "vllm=server", "peft=lora"
    ).vllm
    assert served["components_gib"]["weights"] < 4.5  # vLLM loads it at 4 bits too


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory) -> Path:
    """config.json of Qwen2-VL-2B-Instruct (as on the hub)."""
    path = tmp_path_factory.mktemp("qwen2_vl")
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen2VLForConditionalGeneration"],
                "model_type": "qwen2_vl",
                "hidden_size": 1536,
                "intermediate_size": 8960,
                "num_hidden_layers": 28,
                "num_attention_heads": 12,
                "num_key_value_heads": 2,
                "vocab_size": 151936,
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-06,
                "rope_theta": 1000000.0,
                "tie_word_embeddings": True,
                "torch_dtype": "bfloat16",
                "hidden_act": "silu",
                "sliding_window": 32768,
                "use_sliding_window": False,
                "vision_start_token_id": 151652,
                "vision_end_token_id": 151653,
                "vision_token_id": 151654,
                "image_token_id": 151655,
                "video_token_id": 151656,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                "vision_config": {
                    "depth": 32,
                    "embed_dim": 1280,
                    "mlp_ratio": 4,
                    "num_heads": 16,
                    "in_chans": 3,
                    "hidden_size": 1536,
                    "patch_size": 14,
                    "spatial_merge_size": 2,
                    "spatial_patch_size": 14,
                    "temporal_patch_size": 2,
                },
            }
        )
    )
    return path


def test_a_vision_language_model_is_planned_with_its_vision_tower(qwen2_vl):
    vl = ("model=auto", f"model.name_or_path={qwen2_vl}", "model.dtype=bfloat16", "topology=1x1", "vllm=off")
    memory = plan_of(*vl, "peft=none")
    _, cfg = report(*vl, "action=plan")
    # the class TRL loads (Qwen2VLForConditionalGeneration) on the meta device
    assert cfg.model.num_parameters == 2208985600
    assert 0.6e9 < cfg.model.vision_parameters < 0.7e9
    assert memory.train["components_gib"]["weights"] == pytest.approx(2208985600 * 2 / 2**30)
    assert any("vision tower" in note and "trained" in note for note in memory.notes)
    assert any("data.images_per_prompt=0: prompts planned without images" in note for note in memory.notes)


def test_lora_on_a_vision_language_model_checks_its_real_layers(qwen2_vl):
    vl = (
        "model=auto",
        f"model.name_or_path={qwen2_vl}",
        "model.dtype=bfloat16",
        "topology=1x1",
        "vllm=off",
        "peft=lora",
    )
    memory = plan_of(*vl)
    assert any("frozen under LoRA" in note for note in memory.notes)
    text, _ = report(*vl, "peft.target_modules=[q_proj,qkv,attn_nope]", "action=plan")
    # the vision tower's layers too
    assert "peft.target_modules: ['attn_nope'] are not layers LoRA adapts" in text and "'qkv'" in text


def test_evaluation_needs_held_out_prompts_and_whole_prompt_groups(tmp_path):
    text, _ = report("trainer.eval_strategy=steps", "trainer.eval_steps=2")
    assert "trainer.eval_strategy: is 'steps', but there are no held-out prompts" in text and "data.eval_path" in text
    assert "data.eval_split: data=toy_math has no splits" in report("data.eval_split=test")[0]
    (tmp_path / "eval.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{a} + 1?", "answer": str(a + 1)}) + "\n" for a in range(8))
    )
    held_out = ("trainer.eval_strategy=steps", "trainer.eval_steps=2", f"data.eval_path={tmp_path / 'eval.jsonl'}")
    assert report(*held_out)[0] == ""
    assert (
        "trainer.per_device_eval_batch_size: 3 x world size 2 = 6"
        in report(*held_out, "trainer.per_device_eval_batch_size=3")[0]
    )
    (tmp_path / "bad.jsonl").write_text('{"question": "x"}\n')
    assert (
        "data.prompt_column: 'prompt' is not a column"
        in report(*held_out[:2], f"data.eval_path={tmp_path / 'bad.jsonl'}")[0]
    )
