"""The planner's activation and LM-head terms against the bytes autograd really saves on CPU
(grpo_exp/training/saved_bytes.py), on random-init models with real architecture widths (one
decoder layer, two sequences of 112 tokens, one left-padded as GRPO batches are): every
architecture x {fp32, fp32 + bf16 autocast, bf16} x {without, with activation checkpointing}
within 10%."""

import os
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from grpo_exp.planning import inputs, memory
from grpo_exp.training.saved_bytes import LAYER_KEYS as ARCH_KEYS
from grpo_exp.training.saved_bytes import measure
from tests.helpers import CONF, matrix

ARCHITECTURES = ["qwen0.5b", "qwen3-0.6b", "qwen1.5b", "qwen3-1.7b"]
# The same fit holds for wider ones (docs/memory-planner.md), at ~30 s (qwen3-4b) to minutes each on 2 cores:
# GRPO_EXP_FIDELITY_LARGE=1 adds them.
if os.environ.get("GRPO_EXP_FIDELITY_LARGE"):
    ARCHITECTURES += ["qwen3-4b", "qwen7b", "llama8b"]
SETTINGS = {"fp32": ("float32", False), "fp32+autocast": ("float32", True), "bf16": ("bfloat16", True)}
BATCH, PROMPT, COMPLETION, PADDING = 2, 64, 48, 16
# The vocabulary the measured models get: neither compared term depends on it (a decoder layer's saved
# tensors; the head keeps per-token hidden states and statistics, its logits tile is never saved), yet a
# 151,936-wide LM head is ~4/5 of a qwen3-4b case's FLOPs (emulated bf16 on CPUs without AVX-512).
# One 32,768-wide chunk of trl's fused head.
VOCAB = 32768


def _inputs(model: dict, dtype: str, autocast: bool, checkpointing: bool) -> inputs.Inputs:
    return inputs.Inputs(
        params=model["num_parameters"],
        hidden=model["hidden_size"],
        intermediate=model["intermediate_size"],
        layers=1,
        heads=model["num_attention_heads"],
        kv_heads=model["num_key_value_heads"],
        head_dim=model["head_dim"],
        vocab=model["vocab_size"],
        dtype_bytes=inputs.DTYPE_BYTES[dtype],
        world_size=1,
        capacity=80 * 2**30,
        batch=BATCH,
        steps_per_generation=1,
        completion=COMPLETION,
        prompt=PROMPT,
        checkpointing=checkpointing,
        ref_model=False,
        zero_stage=0,
        offload_optimizer=False,
        offload_params=False,
        lora_params=0,
        vllm_mode="server",
        vllm_util=0.9,
        vllm_tp=1,
        vllm_max_len=4096,
        vllm_sleep=False,
        ds3_gather_for_generation=True,
        device="cpu",
        autocast=autocast and dtype == "float32",
        qk_norm=model["model_type"] in inputs.QK_NORM_MODELS,
    )


@pytest.fixture(scope="module")
def architecture(request):
    """One decoder layer of the architecture, built once per weights dtype."""
    from grpo_exp.training.saved_bytes import _model

    model = OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{request.param}.yaml"))
    built = {}

    def get(dtype):
        if dtype not in built:
            built.clear()  # one model in memory at a time
            built[dtype] = _model({**{k: model[k] for k in ARCH_KEYS}, "vocab_size": VOCAB}, 1, dtype)
        return built[dtype]

    return request.param, model, get


SHAPES = [(setting, checkpointing) for checkpointing in (False, True) for setting in SETTINGS]
CASES = [(a, s, c) for a in ARCHITECTURES for s, c in SHAPES]


@pytest.mark.slow
@pytest.mark.parametrize(
    "architecture,setting,checkpointing",
    # make test: each setting with and without checkpointing once, the architectures in turn; make test-matrix: all
    matrix(CASES, lambda c: ARCHITECTURES.index(c[0]) == SHAPES.index(c[1:]) % len(ARCHITECTURES)),
    indirect=["architecture"],
    ids=[f"{a}-{'ckpt' if c else 'no-ckpt'}-{s}" for a, s, c in CASES],
)
def test_activation_and_head_terms_match_saved_bytes(architecture, setting, checkpointing):
    name, model, get = architecture
    dtype, autocast = SETTINGS[setting]
    arch = {**{k: model[k] for k in ARCH_KEYS}, "vocab_size": VOCAB}
    saved = measure(
        arch,
        layers=1,
        batch=BATCH,
        prompt=PROMPT,
        completion=COMPLETION,
        dtype=dtype,
        autocast=autocast,
        checkpointing=checkpointing,
        padding=PADDING,
        model=get(dtype),
    )
    seq = PROMPT + COMPLETION  # the only s x s tensor is the padding mask, once per forward: no attention matrix
    assert saved.attention_matrix <= BATCH * seq * seq * 4, (
        "the math SDPA kernel ran: the comparison assumes flash/efficient attention"
    )
    x = _inputs(model, dtype, autocast, checkpointing)
    components = memory.estimate_train(x).components
    assert components["activations"] == pytest.approx(saved.layers, rel=0.10), f"{name} {setting}: activations"
    assert memory.lm_head_saved(x, BATCH * seq) == pytest.approx(saved.head, rel=0.10), (
        f"{name} {setting}: the LM head's saved tensors"
    )
    if x.autocast and not checkpointing:  # autocast's 16-bit weight copies (checkpointing recomputes them)
        assert components["autocast_weights"] == pytest.approx(saved.autocast_weights, rel=0.10), (
            f"{name}: autocast's weight copies"
        )


def test_checkpointing_keeps_less_than_it_saves_without():
    x = _inputs(OmegaConf.to_container(OmegaConf.load(CONF / "model" / "qwen7b.yaml")), "bfloat16", True, False)
    x = replace(x, layers=28, batch=4, completion=512, prompt=256)
    assert (
        memory.estimate_train(replace(x, checkpointing=True)).components["activations"]
        < memory.estimate_train(x).components["activations"] / 5
    )
