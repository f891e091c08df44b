"""The tiny model's tokenizer (training/tiny.py builds the model around it): a byte-level BPE trained here on what
toy-math prompts, completions and tool calls look like, its special and markup tokens, and a ChatML chat template
that renders tool calls. Built with `tokenizers` alone (~20 ms), so the plan can count the tokens of the run's own
prompts (planning/prompt_tokens.py) without transformers."""

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


def train_bpe(vocab_size: int, tool_sets: list):
    """The byte-level BPE (a `tokenizers.Tokenizer`) of a tiny model with `vocab_size`, the markup tokens added."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(tool_sets), trainer=trainer)
    return bpe
