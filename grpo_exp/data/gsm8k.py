"""data=gsm8k: GSM8K from the hub id in data.path, or a local copy with its columns (question, answer), read as
data=hf reads it; its answers end in "#### <number>", and the reasoning before it is not the reward target."""

import grpo_exp.data.files as files  # not `from grpo_exp.data import`: data/__init__.py types its shipped loaders

READS_PATH = True
scan = files.scan


def load(data, seed: int):
    raw = files.load(data, seed)
    return raw.map(lambda row: {data.answer_column: row[data.answer_column].split("####")[-1].strip()})
