"""The plan is of the run the user means, on the GPU they have: the card detected (NVML mocked here, real in the
`gpu` tests), TRL's trainer shape for a real model, the command line's options held over an experiment's values,
a loopback rendezvous across nodes named, and the plan's first line saying all of it."""

import json
import shutil
import sys
import types

import pytest
from omegaconf import OmegaConf

from grpo_exp.core import gpus, metrics, rundir
from grpo_exp.results import report
from tests.helpers import FIXTURES, planned, run_driver, run_job

GIB = 2**30
H200 = FIXTURES / "gpu" / "h200-2026-11-26"


def fake_nvml(monkeypatch, cards: list[tuple[str, float]]):
    """pynvml answering with `cards` (name, GiB), as the driver of a GPU machine would."""
    handles = list(range(len(cards)))
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(cards),
        nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetName=lambda h: cards[h][0],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=int(cards[h][1] * GIB), used=0),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(gpus, "_driver_present", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_the_cards_are_read_from_nvml_and_narrowed_by_cuda_visible_devices(monkeypatch):
    fake_nvml(monkeypatch, [("NVIDIA H200", 139.8), ("NVIDIA GeForce RTX 4090", 23.99)])
    assert gpus.detect() == [gpus.Card("NVIDIA H200", 139.8), gpus.Card("NVIDIA GeForce RTX 4090", 23.99)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus.detect() == [gpus.Card("NVIDIA GeForce RTX 4090", 23.99)] and gpus.count() == 1


def test_without_nvml_or_a_driver_there_is_no_card(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import fails, as on a machine without the library
    monkeypatch.setattr(gpus, "_driver_present", lambda: False)
    assert gpus.detect() == []


def test_a_card_name_is_matched_by_its_words():
    assert gpus.same_card("H100-80GB", "NVIDIA H100 80GB HBM3")
    assert gpus.same_card("H200", "NVIDIA H200")
    assert not gpus.same_card("H100-80GB", "NVIDIA H200")
    assert not gpus.same_card("A100-40GB", "NVIDIA A100-SXM4-80GB")


def test_topology_local_plans_the_detected_card_and_names_it_first(monkeypatch, tmp_path, capsys):
    fake_nvml(monkeypatch, [("NVIDIA GeForce RTX 4090", 23.99)])
    ended = run_job("model=qwen1.5b", "topology=local", "action=plan", run_dir=tmp_path / "run", gpus=None)
    first = capsys.readouterr().out.splitlines()[0]
    assert ended.memory.train["capacity_gib"] == pytest.approx(23.99)
    assert "1 x 1 NVIDIA GeForce RTX 4090 (23.99 GiB, detected here)" in first
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert (plan["gpu_name"], plan["card_source"]) == ("NVIDIA GeForce RTX 4090", "detected")


def test_a_detected_card_plans_this_machine_s_cuda_module_loading(monkeypatch, tmp_path):
    """Where the card is detected the plan runs where training will: CUDA_MODULE_LOADING=EAGER there loads every
    kernel at start (cuda_runtime.EAGER_MODULES); a topology's card is another machine's, whose environment it
    does not know."""
    from grpo_exp.planning import cuda_runtime

    fake_nvml(monkeypatch, [("NVIDIA GeForce RTX 4090", 23.99)])

    def runtime(*overrides, name):
        ended = run_job("topology=local", "action=plan", *overrides, run_dir=tmp_path / name, gpus=None)
        return ended.memory.train["components_gib"]["runtime"]

    lazy = runtime(name="lazy")
    monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")
    assert runtime(name="eager") == pytest.approx(lazy + cuda_runtime.EAGER_MODULES / GIB)
    named = ("topology.gpu_name=RTX-4090", "topology.gpu_memory_gib=23.99")
    assert runtime(*named, name="named") == pytest.approx(lazy)


def test_a_topology_naming_another_card_is_a_warning_at_run(monkeypatch):
    from grpo_exp.planning import placement

    fake_nvml(monkeypatch, [("NVIDIA H200", 139.8)])
    cfg = planned("model=qwen0.5b", "topology=1x1").cfg
    warning = placement.card_warnings(cfg.topology, gpus.detect())
    assert warning and "H100-80GB" in warning[0] and "NVIDIA H200" in warning[0]
    cfg.topology.gpu_name, cfg.topology.gpu_memory_gib = "H200", 139.8
    assert placement.card_warnings(cfg.topology, gpus.detect()) == []


def test_no_card_and_no_size_is_planned_as_80_gib_with_a_note():
    found = planned("model=qwen0.5b", "topology=local", "topology.gpus_per_node=1").memory
    assert found.train["capacity_gib"] == 80
    assert any("no GPU detected here" in n for n in found.notes)


@pytest.mark.slow  # the CLI in a subprocess
def test_a_real_model_plans_with_trls_trainer_shape_and_the_first_line_says_it(tmp_path):
    result = run_driver(tmp_path, tmp_path / "cache", "model=qwen7b", "topology=2x8", "action=plan")
    first = result.stdout.splitlines()[0]
    assert "per-device batch 8 x 8 generations" in first and "+ 512 completion tokens" in first
    assert "activation checkpointing on" in first and "1 step(s) per generation" in first
    trainer = rundir.load_config(next(tmp_path.glob("outputs/default/*/config.yaml"))).trainer
    assert (trainer.per_device_train_batch_size, trainer.num_generations, trainer.max_completion_length) == (8, 8, 512)
    assert trainer.activation_checkpointing is True


def test_the_tiny_model_keeps_its_demo_shape_and_the_command_line_wins():
    tiny = planned().cfg.trainer
    assert (tiny.per_device_train_batch_size, tiny.max_completion_length, tiny.activation_checkpointing) == (
        4,
        32,
        False,
    )
    assert planned("trainer.max_completion_length=48").cfg.trainer.max_completion_length == 48


@pytest.mark.slow  # the CLI in a subprocess
def test_a_chosen_topology_holds_over_the_experiments_values(tmp_path):
    result = run_driver(
        tmp_path, tmp_path / "cache", "experiment=open_r1_demo", "topology=2x8", "vllm=server", "action=plan"
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(next(tmp_path.glob("data/*/*/plan.json")).read_text())
    assert len(plan["nodes"]) == 2
    (held,) = [n for n in plan["notes"] if n.startswith("the command line holds over experiment open_r1_demo")]
    assert "topology.nnodes=2 from topology=2x8 (experiment: 1)" in held


def test_nodes_on_a_loopback_rendezvous_are_named():
    notes = planned("model=qwen7b", "topology=2x8").memory.notes
    assert any("loopback" in n and "127.0.0.1" in n for n in notes)
    routed = planned("model=qwen7b", "topology=2x8", "topology.master_addr=10.1.2.3").memory.notes
    assert not any("loopback" in n for n in routed)


def test_prompts_are_planned_at_the_datas_longest_in_the_models_tokens():
    found = planned("model=qwen0.5b", "model.name_or_path=null", "topology=1x1")
    assert found.inputs.prompt == 42  # what the H200 records measured: num_tokens / 16 - 512
    assert any("prompts planned at 42 tokens" in n for n in found.memory.notes)
    hub = planned("model=qwen0.5b", "topology=1x1")  # a hub model's tokenizer is not here: the bound stays
    assert hub.inputs.prompt == hub.cfg.data.max_prompt_length


def test_the_report_compares_like_with_like(tmp_path):
    run = shutil.copytree(H200 / "f_q05_zero2", tmp_path / "f")
    rows = {
        phase: (measured, planned) for _, phase, measured, planned, _ in report.memory_rows(rundir.read_summary(run))
    }
    s = rundir.read_summary(run)
    overhead = s[metrics.plan_component("train", "runtime")] + s[metrics.plan_component("train", "allocator_reserve")]
    assert rows["generate"] == (f"{s[metrics.peak_phase('generate', 'alloc_max')]:.2f}", f"{7.67 - overhead:.2f}")
    assert rows["peak"][0] == f"{s[metrics.peak('train', 'device_used_max')]:.2f}"  # NVML: what OOMs
    errors = rundir.plan_errors(s)
    assert errors[metrics.plan_error("peak")] == pytest.approx(100 * (23.99 - 23.19) / 23.19, abs=0.1)
    assert set(errors) >= {metrics.plan_error(p) for p in ("generate", "reward", "train", "optimizer")}


def test_calibrate_reads_the_gpu_records(tmp_path):
    from grpo_exp.results import calibrate

    result = calibrate.calibrate([str(H200)], tmp_path / "calibration.json")
    assert result["device"] == "cuda" and result["stat"] == "device_used_max" and len(result["runs"]) == 3
    assert all(abs(r["error_before_pct"]) < 10 for r in result["runs"])


# The CUDA paths on a real GPU: skipped here, run by ../shared/gpu/run.sh on a GPU machine.
torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_gpu
def test_the_card_is_detected_on_a_gpu():
    cards = gpus.detect()
    assert cards and cards[0].memory_gib == pytest.approx(torch.cuda.mem_get_info(0)[1] / GIB, rel=0.01)
    assert gpus.same_card(cards[0].name, torch.cuda.get_device_name(0))


@pytest.mark.gpu
@needs_gpu
def test_a_cuda_oom_is_classified_with_the_allocators_numbers():
    from grpo_exp.core import outcome

    try:
        torch.empty(int(torch.cuda.mem_get_info(0)[1] * 2), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as exc:
        ended = outcome.classify(exc, 0, None)
    assert ended["status"] == "oom" and ended["oom"]["kind"] == "cuda"


def test_a_plan_counts_the_datas_prompts_once(tmp_path, monkeypatch):
    """The inputs, the headline and preflight.on_oom=fit's every try read the longest prompt: the data is read and
    tokenized once (a user's loader, a large file: each count is the whole data)."""
    from grpo_exp.planning import prompt_tokens

    counted = []
    count = prompt_tokens._count
    monkeypatch.setattr(prompt_tokens, "_COUNTED", {})
    monkeypatch.setattr(prompt_tokens, "_count", lambda cfg: counted.append(1) or count(cfg))
    overrides = ["model=qwen0.5b", "model.name_or_path=null", "topology=1x1", "topology.gpu_memory_gib=12"]
    ended = run_job(
        *overrides,
        "trainer.per_device_train_batch_size=512",
        "trainer.num_generations=8",
        "preflight.on_oom=fit",
        "action=plan",
        "data.num_samples=512",
        run_dir=tmp_path / "run",
    )
    assert ended.code == 0 and ended.memory.fits
    assert OmegaConf.load(tmp_path / "run" / "config.yaml").preflight.fitted  # fit tried other shapes: it re-planned
    assert any("prompts planned at" in n for n in ended.memory.notes)
    assert counted == [1]
