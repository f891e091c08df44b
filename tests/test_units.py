"""Pure functions: rewards, data loaders, run-dir files, process counts. No training."""

import math

import pytest
from omegaconf import OmegaConf

from grpo_exp.core import outcome, rundir
from grpo_exp.launching import launch
from grpo_exp.training import data, rewards
from tests.conftest import REPO, compose_cfg


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<think>7+5</think><answer>12</answer>", "12"),
        ("so the answer is 1,234.", "1234"),
        ("<answer> -3 </answer> and then 99", "-3"),
        ("no number here", "no number here"),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert rewards.extract_answer(text) == expected


def test_correctness_and_format_on_chat_completions():
    completions = [
        [{"role": "assistant", "content": "<think>2*21</think><answer>42</answer>"}],
        [{"role": "assistant", "content": "I think 41"}],
        [{"role": "assistant", "content": "<answer>42.0</answer>"}],
    ]
    assert rewards.correctness(completions, answer=["42", "42", "42"]) == [1.0, 0.0, 1.0]
    assert rewards.think_answer_format(completions) == [1.0, 0.0, 0.0]


def test_answer_closeness_is_dense_and_peaks_at_the_answer():
    scores = rewards.answer_closeness(["10", "12", "20", "none"], answer=["10"] * 4)
    assert scores[0] == 1.0 and 1.0 > scores[1] > scores[2] > 0.0 and scores[3] == 0.0


def test_toy_math_is_deterministic_and_exact():
    cfg = OmegaConf.create({"num_samples": 50})
    first, second = data.toy_math(cfg, seed=1), data.toy_math(cfg, seed=1)
    assert first.to_list() == second.to_list() and len(first) == 50
    for row in first:
        a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
        assert eval(f"{a}{op}{b}") == int(row["answer"])


def test_gsm8k_loader_reads_local_file_and_extracts_final_answer():
    cfg = compose_cfg("data=gsm8k", "data.path=tests/fixtures/gsm8k_sample.jsonl").data
    ds = data.gsm8k(cfg, seed=0)
    assert ds.column_names == ["question", "answer"]
    assert ds[0]["answer"] == "72" and ds[7]["answer"] == "990"


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "save_to_disk"])
def test_data_hf_reads_each_format_with_its_own_column_names(tmp_path, fmt):
    """The worker's loader on each local format: prompt and answer columns renamed, every other column
    kept for the reward functions (test_e2e_config trains on one of them)."""
    from datasets import Dataset

    rows = [{"question": f"What is {a} + {a}?", "solution": str(2 * a), "level": a % 3} for a in range(8)]
    ds = Dataset.from_list(rows)
    path = {"parquet": "d.parquet", "csv": "d.csv", "json": "d.jsonl", "save_to_disk": "saved"}[fmt]
    write = {"parquet": ds.to_parquet, "csv": lambda p: ds.to_csv(p, index=False), "json": ds.to_json}
    write.get(fmt, ds.save_to_disk)(tmp_path / path)
    cfg = compose_cfg(
        "data=hf",
        f"data.path={tmp_path / path}",
        "data.prompt_column=question",
        "data.answer_column=solution",
        "data.max_prompt_length=null",  # no tokenizer needed
    )
    loaded = data.build_dataset(cfg.data, tokenizer=None, seed=0)
    assert sorted(loaded.column_names) == ["answer", "level", "prompt"] and len(loaded) == 8
    assert loaded[3]["prompt"] == [{"role": "user", "content": "What is 3 + 3?"}]
    assert str(loaded[3]["answer"]) == "6" and loaded[3]["level"] == 0


def test_to_chat_adds_system_prompt_once():
    assert data.to_chat("q", "sys") == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    already = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert data.to_chat(already, "other") == already


def test_metrics_writer_flushes_each_line_and_drops_nan(tmp_path):
    writer = rundir.MetricsWriter(tmp_path)
    writer.write(1, {"loss": 0.5, "reward": math.nan})
    assert rundir.read_metrics(tmp_path) == [{"step": 1, "loss": 0.5, "reward": None}]  # before close
    writer.close()


def test_summary_merges_and_the_status_brings_its_exit_code(tmp_path):
    outcome.write_status(tmp_path, "running", world_size=2)
    assert rundir.read_summary(tmp_path) == {"status": "running", "exit_code": None, "world_size": 2}
    summary = outcome.write_status(tmp_path, "failed", error="boom")
    assert summary == {
        "status": "failed",
        "exit_code": 1,
        "world_size": 2,
        "error": "boom",
        "ended_at": summary["ended_at"],
    }
    assert rundir.read_summary(tmp_path) == summary
    with pytest.raises(KeyError):  # a status without an exit code is a bug, not exit code 1
        outcome.write_status(tmp_path, "finished")


@pytest.mark.parametrize("visible,count", [("", 0), ("0", 1), ("0,1,3", 3), ("-1", 0)])
def test_visible_gpus_honours_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert launch.visible_gpus() == count


def test_default_run_needs_no_hub_and_real_ones_do():
    assert not launch.needs_hub(compose_cfg())
    assert launch.process_env(compose_cfg(), {})["HF_HUB_OFFLINE"] == "1"
    assert launch.needs_hub(compose_cfg("model=qwen7b"))
    assert launch.needs_hub(compose_cfg("data=gsm8k"))
    assert not launch.needs_hub(compose_cfg("data=gsm8k", "data.path=tests/fixtures/gsm8k_sample.jsonl"))


def test_driver_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, grpo_exp.__main__, grpo_exp.config.checks, grpo_exp.planning.checks; "
        "print(sorted({'torch','transformers','trl','datasets'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


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


def test_the_html_report_is_richs_export_of_the_table_with_the_heatmap_inlined(tmp_path):
    from grpo_exp.results import compare

    runs = [
        compare.Run(
            str(i),
            {"trainer.num_generations": str(g), "trainer.per_device_train_batch_size": str(b)},
            {"status": status, "memory/peak/train/host_rss_max_gib": 1.5 + i},
        )
        for i, (g, b, status) in enumerate(
            [(2, 4, "completed"), (2, 8, "completed"), (4, 4, "completed"), (4, 8, "oom")]
        )
    ]
    png = compare.heatmap(runs, tmp_path / "h.png")
    page = compare.html_report(runs, png, tmp_path / "r.html", "sweep x").read_text()
    assert page.startswith("<!doctype html>") and "<title>sweep x</title>" in page and "data:image/png;base64," in page
    assert "trainer.num_generations" in page and page.count("completed") == 3 and "oom" in page


def test_wandb_starts_beside_the_trainer_build_and_its_failure_reaches_the_worker(tmp_path, monkeypatch):
    """tracking.start returns at once (wandb.init runs in a thread); ready() joins it and raises what
    init raised, in the worker's thread; finish() after a failed init has nothing to finish."""
    import threading

    import wandb

    from grpo_exp.training import tracking

    release = threading.Event()

    def init(**kwargs):
        release.wait(timeout=10)
        raise RuntimeError(f"no W&B for {kwargs['id']}")

    monkeypatch.setattr(wandb, "init", init)
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("[]\n")
    tracker = tracking.start(compose_cfg("logger.mode=offline"), tmp_path)
    assert tracker.run is None  # not waited for: init is still blocked
    release.set()
    with pytest.raises(RuntimeError, match="no W&B for"):
        tracker.ready()
    tracker.finish({"status": "failed"}, 1)


@pytest.mark.slow  # a subprocess importing trl: ~6 s of make test-fast's budget
def test_workers_that_do_not_quantize_never_import_bitsandbytes():
    """Its import loads torch._inductor (~1.2 s of each worker's start); a quantized model or an 8-bit
    optimizer keeps it (test_quantized_vision_eval trains QLoRA for real)."""
    import subprocess
    import sys

    from grpo_exp.training import build

    code = (
        "import sys; from tests.conftest import compose_cfg; from grpo_exp.training import build; "
        "hidden = build.hide_unused_bitsandbytes(compose_cfg()); from trl import GRPOTrainer; "
        "from transformers.utils import is_bitsandbytes_available; "
        "print(hidden, sys.modules['bitsandbytes'] is None, is_bitsandbytes_available())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip().splitlines()[-1:] == ["True True False"], out.stdout[-2000:] + out.stderr[-2000:]
    before = sys.modules.get("bitsandbytes", "absent")
    assert not build.hide_unused_bitsandbytes(compose_cfg("peft=qlora"))
    assert not build.hide_unused_bitsandbytes(compose_cfg("trainer.optim=paged_adamw_8bit"))
    assert sys.modules.get("bitsandbytes", "absent") is before


@pytest.mark.slow
def test_tests_reading_one_shared_run_share_one_xdist_worker(tmp_path):
    """make test's speed rests on it: under --dist loadgroup every test reading a shared run goes to the
    worker that made it (tests/conftest.py; xdist alone lost the groups on pytest 9)."""
    import os
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems  # noqa\n")
    (tmp_path / "test_groups.py").write_text(
        "import os, pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def two_job_sweep():\n    return os.environ['PYTEST_XDIST_WORKER']\n"
        + "".join(f"def test_{i}(two_job_sweep):\n    print(two_job_sweep)\n" for i in range(6))
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    workers = {line.split("]")[0] for line in out.stdout.splitlines() if "PASSED" in line}
    assert out.returncode == 0 and len(workers) == 1, out.stdout[-2000:]
