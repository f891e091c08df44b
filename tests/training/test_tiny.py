"""The default tiny model: built offline, once."""

from tests.helpers import compose_cfg


def test_tiny_model_builds_offline_once(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from grpo_exp.training import tiny

    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model_cfg = compose_cfg().model
    path = tiny.tiny_model_dir(model_cfg)
    assert (path / "config.json").is_file() and (path / "READY").is_file()
    tok = AutoTokenizer.from_pretrained(path)
    assert len(tok) <= model_cfg.vocab_size and tok.eos_token == "<|im_end|>"
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    built_at = (path / "READY").stat().st_mtime_ns
    assert tiny.tiny_model_dir(model_cfg) == path and (path / "READY").stat().st_mtime_ns == built_at  # cached
    other = tiny.tiny_model_dir(compose_cfg("model.num_hidden_layers=3").model)
    assert other != path  # different architecture numbers, different cache entry
