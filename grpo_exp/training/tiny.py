"""The default model: a random-init Qwen2 built from `conf/model/tiny.yaml`, with a byte-level BPE
tokenizer trained here on the toy-math vocabulary and a ChatML chat template. Nothing touches a hub.

Built once and cached as an ordinary HF model directory, which GRPOTrainer then loads through the
same `from_pretrained` path a real model takes. Ranks starting together share one build (file lock).
"""

import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import cache_root
from grpo_exp.config.model_info import ARCH_KEYS

BUILD_VERSION = 1  # bump when the recipe below changes, so stale caches are rebuilt

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_model_dir(model_cfg: DictConfig) -> Path:
    """Where the tiny model for these architecture numbers lives (built if missing)."""
    arch = {k: model_cfg[k] for k in ARCH_KEYS}
    key = hashlib.sha256(json.dumps([BUILD_VERSION, arch], sort_keys=True).encode()).hexdigest()[:12]
    path = cache_root() / f"tiny-{model_cfg.model_type}-{key}"
    if not (path / "READY").exists():
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (path / "READY").exists():
                _build(arch, path)
    return path


def _corpus() -> list[str]:
    """Text the tokenizer learns from: what toy_math prompts and good completions look like."""
    lines = [
        "What is 17 + 25? <think>17 plus 25 is 42.</think><answer>42</answer>",
        "Think in <think></think>, then give the final number in <answer></answer>.",
        "system user assistant The answer is the sum, difference or product of two numbers.",
    ]
    lines += [f"What is {a} {op} {b}?" for a in range(0, 100, 7) for b in range(0, 100, 11) for op in "+-*"]
    lines += [str(n) for n in range(-100, 10000, 37)]
    return lines


def _build(arch: dict, path: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=arch["vocab_size"],
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
    assert len(tokenizer) <= arch["vocab_size"], "tokenizer outgrew model.vocab_size"

    torch.manual_seed(0)
    config = Qwen2Config(
        **arch,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "READY").write_text(OmegaConf.to_yaml(OmegaConf.create(arch)))
    tmp.rename(path)
