"""The default model: a random-init Qwen2 built from `conf/model/tiny.yaml`, with a byte-level BPE
tokenizer trained here on the toy-math vocabulary and a ChatML chat template that renders tool calls
(Qwen's `<tool_call>{json}</tool_call>` form, with the response template TRL parses them by). Nothing
touches a hub.

A run with tools (env=calculator, env=number_game, your own) gets the same model after a short supervised
warm start on calls of the run's own tools (`tool_sets`: their schemas, config/env.py), cached per set of
schemas: a random-init model never writes a well-formed call, so without it an agentic run on CPU would only
ever see failed or absent tool calls. The calls in training still come from the model's own tokens; the warm
start only taught it the tools' names, argument names and types.

Built once and cached as an ordinary HF model directory, which GRPOTrainer then loads through the
same `from_pretrained` path a real model takes. Ranks starting together share one build (file lock).
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp.config.model_info import ARCH_KEYS, tiny_model_path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Whole tokens for the markup a completion is made of (added, not special: decoding keeps them, so TRL's
# response parser sees the tool-call tags).
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<think>", "</think>"]
# ChatML; with tools, a system line naming them first, and an assistant turn's calls as
# <tool_call>{"name": ..., "arguments": {...}}</tool_call>. Prefix-preserving: each message renders alone.
CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\ntools: ' -}}"
    "{%- for tool in tools -%}{{- tool.function.name if tool.function is defined else tool.name -}}"
    "{{- ', ' if not loop.last -}}{%- endfor -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'assistant' and message.tool_calls is defined and message.tool_calls -%}"
    "{{- '<|im_start|>assistant\n' + (message.content or '') -}}"
    "{%- for call in message.tool_calls -%}"
    "{{- '<tool_call>' + ({'name': call.function.name, 'arguments': call.function.arguments} | tojson) -}}"
    "{{- '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)
# How transformers (>= 5.13) parses an assistant turn back into content and tool calls (TRL's Qwen template,
# without the reasoning field).
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def tiny_model_dir(model_cfg: DictConfig, tool_sets: list | None = None) -> Path:
    """Where the tiny model for these architecture numbers lives (built if missing); with `tool_sets`, the
    one warm-started on calls of those tools."""
    arch = {k: model_cfg[k] for k in ARCH_KEYS}
    path = tiny_model_path(model_cfg, tool_sets)
    if not (path / "READY").exists():
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (path / "READY").exists():
                _build(arch, path, tool_sets or [])
    return path


def _corpus(tool_sets: list) -> list[str]:
    """Text the tokenizer learns from: what toy_math prompts, good completions and the tools' calls look like
    (the shipped ones always, the run's own when it has them)."""
    lines = [
        "What is 17 + 25? <think>17 plus 25 is 42.</think><answer>42</answer>",
        "Think in <think></think>, then give the final number in <answer></answer>.",
        "system user assistant tool The answer is the sum, difference or product of two numbers.",
        "tools: calculator, guess I picked a number from 0 to 99: find it with guess. higher lower correct",
    ]
    lines += [f"What is {a} {op} {b}?" for a in range(0, 100, 7) for b in range(0, 100, 11) for op in "+-*"]
    lines += [
        f'{{"name": "calculator", "arguments": {{"expression": "{a} + {b}"}}}}' for a, b in ((3, 4), (12, 7))
    ] * 20
    lines += [f'{{"name": "guess", "arguments": {{"number": {n}}}}}' for n in range(0, 100, 9)] * 4
    lines += [str(n) for n in range(-100, 10000, 37)]
    for schema in (tool["function"] for tools in tool_sets for tool in tools):
        arguments = ", ".join(f'"{name}": 1' for name in schema.get("parameters", {}).get("properties", {}))
        lines += [f'tools: {schema["name"]} {{"name": "{schema["name"]}", "arguments": {{{arguments}}}}}'] * 20
    return lines


def _build(arch: dict, path: Path, tool_sets: list) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=arch["vocab_size"] - len(MARKUP_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(_corpus(tool_sets), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        response_template=RESPONSE_TEMPLATE,
    )
    tokenizer.add_tokens(MARKUP_TOKENS)
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
    if tool_sets:
        from grpo_exp.training.tool_warm_start import warm_start

        warm_start(model, tokenizer, tool_sets)

    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "READY").write_text(OmegaConf.to_yaml(OmegaConf.create(arch)))
    tmp.rename(path)


if __name__ == "__main__":
    # `python -m grpo_exp.training.tiny < config.yaml`: build the run's tiny model and print its directory. The
    # driver calls this before it starts a vLLM server for the tiny model (the server loads the directory; the
    # driver itself never imports torch).
    import sys

    from grpo_exp.config import env

    cfg = OmegaConf.create(sys.stdin.read())
    print(tiny_model_dir(cfg.model, env.tool_sets(cfg)))
