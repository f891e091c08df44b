"""A short supervised warm start of the tiny model on the run's own tools (tiny.py builds the tools variant with
it, one per set of tool schemas): generated episodes rendered with the tiny chat template and trained on the
assistant turns only.

A random-init model never writes a well-formed `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
so an agentic run of the tiny model would only ever see failed or absent calls. The episodes are built from
the schemas TRL shows the model (config/env.py's tool_sets: names, argument names and JSON types, read from
the signatures and docstrings): each offers one tool set, as one environment's episode does, and calls one of
its tools with arguments of the declared types. The shipped tools get their own games (a calculator
expression, a number game played by halving), so their calls are also ones the tool accepts. After this warm
start the model writes calls itself; GRPO then trains on whatever it writes (nothing is scripted at generation).
"""

import random

from grpo_exp.training.environments import NumberGame, calculator

STEPS = 200  # then 18-22 of 23 sampled calls well-formed and accepted, for calculator, guess and multiply/add
BATCH = 8
EPISODES = 512  # generated and tokenized once (rendering dominates otherwise), batches drawn from them
LEARNING_RATE = 5e-3  # decayed to 0 over STEPS (3e-3: 14-19 of 23)
SYSTEM = "Think in <think></think>, then give the final number in <answer></answer>."  # toy_math's system prompt


def _call(name: str, **arguments) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


WORDS = ("hello", "apple", "river", "seven", "blue", "stone", "cloud", "green")


def argument(rng: random.Random, schema: dict):
    """A value of the JSON type a tool's parameter declares (an enum's own choices where it lists them)."""
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    kind = rng.choice(kind) if isinstance(kind, list) else kind
    if kind == "integer":
        return rng.randint(0, 99)
    if kind == "number":
        return round(rng.uniform(0, 99), 1)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [argument(rng, schema.get("items", {"type": "integer"})) for _ in range(rng.randint(1, 3))]
    if kind == "object":
        return {}
    return rng.choice(WORDS)  # string, or a type the schema leaves open


def episode(rng: random.Random, tool_set: list[dict]) -> tuple[list[dict], list]:
    """One rendered-to-be conversation offering `tool_set` (JSON schemas) and the schemas it offers: one to three
    calls of its tools, each with arguments of the declared types, then an answer. The calculator gets
    expressions it evaluates; half the episodes of a set with the number game's guess play a real game."""
    a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice("+-*")
    question = f"What is {a} {op} {b}?"
    head = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.7 else []
    if any(tool["function"]["name"] == "guess" for tool in tool_set) and rng.random() < 0.5:
        return _number_game(rng, head, question), tool_set
    messages = [*head, {"role": "user", "content": question}]
    for _ in range(rng.randint(1, 3)):  # several calls: the name is written more often than once per episode
        tool = rng.choice(tool_set)["function"]
        if tool["name"] == "calculator":
            arguments = {"expression": f"{rng.randint(0, 99)} {rng.choice('+-*')} {rng.randint(0, 99)}"}
            result = calculator(arguments["expression"])
        else:
            properties = tool.get("parameters", {}).get("properties", {})
            arguments = {name: argument(rng, spec) for name, spec in properties.items()}
            result = str(rng.randint(0, 999))  # what a tool answers is the prompt's part of the episode, not learned
        messages += [_call(tool["name"], **arguments), {"role": "tool", "name": tool["name"], "content": result}]
    messages.append({"role": "assistant", "content": f"<answer>{result}</answer>"})
    return messages, tool_set


def _number_game(rng: random.Random, head: list[dict], question: str) -> list[dict]:
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
    return messages


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


def warm_start(model, tokenizer, tool_sets: list[list[dict]], seed: int = 0) -> float:
    """Train `model` in place on generated episodes of `tool_sets` (each a list of JSON schemas offered together);
    returns the last step's loss (nats per trained token)."""
    import torch

    rng = random.Random(seed)
    torch.manual_seed(seed)
    pool = [tokenized(tokenizer, *episode(rng, rng.choice(tool_sets))) for _ in range(EPISODES)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    # decayed to 0: a constant rate leaves the model wherever its last steps threw it
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / STEPS)
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
        schedule.step()
    model.eval()
    return loss.item()
