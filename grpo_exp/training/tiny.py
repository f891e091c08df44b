"""The default model: a random-init Qwen2 built from `conf/model/tiny.yaml` (tiny-moe, tiny-sliding, tiny-hybrid: a
Qwen3-MoE, Gemma-3 or Qwen3-Next of its size, their family's numbers from model_families), with a byte-level BPE
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

from grpo_exp.core import tiny_tokenizer
from grpo_exp.core.tiny_tokenizer import CHAT_TEMPLATE, MARKUP_TOKENS, RESPONSE_TEMPLATE
from grpo_exp.models.model_families import hf_kwargs
from grpo_exp.models.model_info import ARCH_KEYS, tiny_model_path
from grpo_exp.training.tool_warm_start import warm_start


def tiny_model_dir(model_cfg: DictConfig, tool_sets: list | None = None) -> Path:
    """Where the tiny model for these architecture numbers lives (built if missing); with `tool_sets`, the
    one warm-started on calls of those tools."""
    arch = {"model_type": model_cfg.model_type, **{k: model_cfg[k] for k in ARCH_KEYS}} | hf_kwargs(model_cfg)
    path = tiny_model_path(model_cfg, tool_sets)
    if not (path / "READY").exists():
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if not (path / "READY").exists():
                _build(arch, path, tool_sets or [])
    return path


def _build(arch: dict, path: Path, tool_sets: list) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    bpe = tiny_tokenizer.train_bpe(arch["vocab_size"], tool_sets)
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
    config = AutoConfig.for_model(
        **arch,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if tool_sets:
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
    assert isinstance(cfg, DictConfig), "a run's config on standard input"
    print(tiny_model_dir(cfg.model, env.tool_sets(cfg)))
