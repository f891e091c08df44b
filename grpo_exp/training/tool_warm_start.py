"""A short supervised warm start of the tiny model on the shipped environments' tool calls (tiny.py builds
the tools variant with it): generated episodes of env=calculator and env=number_game, rendered with the
tiny chat template and trained on the assistant turns only.

A random-init model never writes a well-formed `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
so an agentic run of the tiny model would only ever see failed or absent calls. After this warm start it
writes the calls itself; GRPO then trains on whatever it writes (nothing is scripted at generation).
"""

import random

from grpo_exp.training.environments import NumberGame, calculator

STEPS = 200  # then 12 of the test's 15 sampled calculator completions are calls the tool accepts (150: 8, borderline)
BATCH = 8
EPISODES = 512  # generated and tokenized once (rendering dominates otherwise), batches drawn from them
LEARNING_RATE = 3e-3
SYSTEM = "Think in <think></think>, then give the final number in <answer></answer>."  # toy_math's system prompt


def _call(name: str, **arguments) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def episode(rng: random.Random) -> tuple[list[dict], list]:
    """One rendered-to-be conversation and the tools it was given: a calculator call and the answer it
    returns, or a number game played by halving the range."""
    a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice("+-*")
    question = f"What is {a} {op} {b}?"
    head = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.7 else []
    if rng.random() < 0.5:
        result = calculator(f"{a} {op} {b}")
        messages = [
            *head,
            {"role": "user", "content": question},
            _call("calculator", expression=f"{a} {op} {b}"),
            {"role": "tool", "name": "calculator", "content": result},
            {"role": "assistant", "content": f"<answer>{result}</answer>"},
        ]
        return messages, [calculator]
    game = NumberGame()
    observation = game.reset(answer=rng.randint(-9999, 9999))
    messages = [*head, {"role": "user", "content": question + observation}]
    low, high = game.low, game.high
    for _ in range(4):
        number = (low + high) // 2
        said = game.guess(number)
        messages += [_call("guess", number=number), {"role": "tool", "name": "guess", "content": said}]
        if said == "correct":
            break
        low, high = (number + 1, high) if said == "higher" else (low, number - 1)
    messages.append({"role": "assistant", "content": f"<answer>{game.last}</answer>"})
    return messages, [game.guess]


def tokenized(tokenizer, messages: list[dict], tools: list) -> tuple[list[int], list[int]]:
    """Token ids of the conversation and, per position, whether it is an assistant turn's own token (its
    content, calls and <|im_end|>: what the model writes at generation; the header before it is the prompt's)."""

    def ids(upto: int, prompt: bool = False) -> list[int]:
        return tokenizer.apply_chat_template(
            messages[:upto], tools=tools, tokenize=True, return_dict=False, add_generation_prompt=prompt
        )

    full = ids(len(messages))
    trained = [0] * len(full)
    for k, message in enumerate(messages):
        if message["role"] == "assistant":
            start, end = len(ids(k, prompt=True)), len(ids(k + 1)) - 1  # the newline after <|im_end|> is the template's
            trained[start:end] = [1] * (end - start)
    return full, trained


def warm_start(model, tokenizer, seed: int = 0) -> float:
    """Train `model` in place on generated episodes; returns the last step's loss (nats per trained token)."""
    import torch

    rng = random.Random(seed)
    torch.manual_seed(seed)
    pool = [tokenized(tokenizer, *episode(rng)) for _ in range(EPISODES)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(STEPS):
        batch = rng.sample(pool, BATCH)
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((BATCH, width), tokenizer.pad_token_id)
        labels = torch.full((BATCH, width), -100)
        attention = torch.zeros((BATCH, width), dtype=torch.long)
        for row, (ids, trained) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
            labels[row, : len(ids)] = torch.tensor([i if t else -100 for i, t in zip(ids, trained, strict=True)])
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()
