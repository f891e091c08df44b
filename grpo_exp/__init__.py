"""grpo_exp: GRPO experiments on TRL + vLLM + DeepSpeed + PEFT from one Hydra config (README.md).

Entry points: `python -m grpo_exp` (the driver), `python -m grpo_exp.compare`, `.dashboard`,
`.model_info`, `.schema_gen`; workers run `python -m grpo_exp.worker <run dir>/config.yaml`.
"""

GIB = 2**30  # every memory figure grpo_exp reports is in GiB (2^30 bytes), named *_gib
