"""The run a user writes without grpo_exp: one process, TRL only, report_to none, no checkpoint.

    python benchmarks/plain_trl.py spec.json

benchmarks/startup.py writes spec.json from grpo_exp's composed config so both sides train the same
model on the same prompts with the same GRPOConfig; nothing here imports grpo_exp but its pure-Python
reward functions (the same work on both sides).
"""

import json
import random
import sys

from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from grpo_exp.training.rewards import answer_closeness, correctness, think_answer_format

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def prompts(n: int, seed: int, system_prompt: str) -> Dataset:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice(list(OPS))
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": f"What is {a} {op} {b}?"}]
        rows.append({"prompt": messages, "answer": str(OPS[op](a, b))})
    return Dataset.from_list(rows)


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    trainer = GRPOTrainer(
        model=spec["model"],
        reward_funcs=[correctness, think_answer_format, answer_closeness],
        args=GRPOConfig(**spec["grpo_config"], output_dir=spec["output_dir"], report_to="none", use_cpu=True),
        train_dataset=prompts(spec["num_samples"], spec["seed"], spec["system_prompt"]),
        processing_class=tokenizer,
    )
    result = trainer.train()
    print(json.dumps({"train_runtime_s": result.metrics["train_runtime"]}))  # benchmarks/startup.py reads it


if __name__ == "__main__":
    main()
