"""The longest prompt of the run's own data in the run's own tokens, where the plan can count them: TRL pads a batch's
prompts to its longest, so that (not data.max_prompt_length, only a bound) is the prompt the activations and the
KV cache hold. Counted where the data's prompts are known before launch (data=toy_math generates them from the seed;
a user's loader is called once) with the tiny model's tokenizer
(model.name_or_path=null: built with `tokenizers` as training/tiny.py builds it) or a local model directory's
tokenizer.json and chat template. Anything else (a hub model, data that is not here) is not counted: the plan
keeps data.max_prompt_length. No transformers import: `tokenizers` and jinja2, ~50 ms.
"""

import json
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import data as loaders
from grpo_exp import is_local_path
from grpo_exp.config import env
from grpo_exp.core import tiny_tokenizer

# {the model, the data and the seed, as JSON: what the count depends on} -> the count. A plan reads it from its
# inputs, its headline and (preflight.on_oom=fit) each plan it tries: the data is read and tokenized once.
_COUNTED: dict[str, int | None] = {}


def longest_prompt(cfg: DictConfig) -> int | None:
    """Tokens of the longest prompt (chat template and generation prompt included), or None where not counted."""
    if env.active(cfg):  # tools add their schemas to the template: not counted
        return None
    what = [OmegaConf.to_container(node, resolve=True) for node in (cfg.model, cfg.data)]
    key = json.dumps([*what, cfg.seed], sort_keys=True, default=str)
    if key not in _COUNTED:
        _COUNTED[key] = _count(cfg)
    return _COUNTED[key]


def _count(cfg: DictConfig) -> int | None:
    found = _tokenizer(cfg.model)
    prompts = loaders.prompts(cfg.data, cfg.seed) if found is not None and cfg.data.conversational else None
    if not prompts:
        return None
    tokenizer, template = found
    system = [{"role": "system", "content": cfg.data.system_prompt}] if cfg.data.system_prompt else []

    def messages(prompt) -> list:
        return list(prompt) if isinstance(prompt, list) else [*system, {"role": "user", "content": str(prompt)}]

    texts = {template.render(messages=messages(p), add_generation_prompt=True) for p in prompts}
    return max(len(encoding.ids) for encoding in tokenizer.encode_batch(sorted(texts), add_special_tokens=False))


def _tokenizer(model: DictConfig):
    """(tokenizers.Tokenizer, jinja2 template) of the run's model, or None where it is not on this machine."""
    if model.name_or_path is None:
        return _tiny(model.vocab_size)
    path = Path(model.name_or_path).expanduser()
    if not is_local_path(model.name_or_path) or not (path / "tokenizer.json").is_file():
        return None
    template = _chat_template(path)
    if template is None:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path / "tokenizer.json")), _compiled(template)


@lru_cache(maxsize=4)
def _tiny(vocab_size: int):
    """The tiny model's tokenizer as the run loads it: transformers splits its numbers a digit per token."""
    from tokenizers import pre_tokenizers

    bpe = tiny_tokenizer.train_bpe(vocab_size, [])
    bpe.add_tokens(tiny_tokenizer.MARKUP_TOKENS)
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    return bpe, _compiled(tiny_tokenizer.CHAT_TEMPLATE)


def _chat_template(path: Path) -> str | None:
    """A model directory's chat template: chat_template.jinja, or tokenizer_config.json's (a string)."""
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text()
    config = path / "tokenizer_config.json"
    template = json.loads(config.read_text()).get("chat_template") if config.is_file() else None
    return template if isinstance(template, str) else None


def _compiled(template: str):
    """The template as transformers renders it (an immutable sandbox, trim_blocks and lstrip_blocks)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise
    return environment.from_string(template)


def _raise(message: str):
    raise ValueError(message)
