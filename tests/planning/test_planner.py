"""The memory planner: hand-computed components, DeepSpeed's estimator, monotonicity, every shipped
model x cluster topology, verdicts and ranked fixes, and action=run refusing a predicted OOM."""

import dataclasses
import itertools

import pytest

from grpo_exp.planning import activations, fixes, lora, memory, placement, planner, report, vllm_engine
from tests.helpers import compose_cfg, fast_lane, group_options, matrix, planned, run_job

GIB = 2**30
P7 = 7615616512  # Qwen2.5-7B


def plan_inputs(*overrides, gpus=0):
    return planned(*overrides, gpus=gpus).inputs


def test_model_states_by_zero_stage_hand_computed():
    base = plan_inputs("model=qwen7b", "topology=1x8")
    assert base.world_size == 8 and base.dtype_bytes == 2
    # plain DDP, bf16 weights: 2P weights, 2P gradients, AdamW moments in bf16 (4P)
    assert memory.model_states(base) == {
        "weights": 2 * P7,
        "gradients": 2 * P7,
        "fp32_gradients": 0.0,
        "optimizer": 4 * P7,
    }
    z2 = memory.model_states(dataclasses.replace(base, zero_stage=2))
    # DeepSpeed's estimate_zero2_model_states_mem_needs: 2P + 18P/N (16-bit params + 2+4+4+8 bytes/N)
    assert sum(z2.values()) == pytest.approx(2 * P7 + 18 * P7 / 8)
    z3 = memory.model_states(dataclasses.replace(base, zero_stage=3))
    # backward's 16-bit gradient partition; the step's fp32 copy (P/N < sub_group_size 1e9: the whole partition)
    assert z3 == {
        "weights": 2 * P7 / 8,
        "gradients": 2 * P7 / 8,
        "fp32_gradients": 4 * P7 / 8,
        "optimizer": 12 * P7 / 8,
    }
    z3_offload = memory.model_states(
        dataclasses.replace(base, zero_stage=3, offload_optimizer=True, offload_params=True)
    )
    assert z3_offload == {"weights": 0.0, "gradients": 2 * P7 / 8, "fp32_gradients": 0.0, "optimizer": 0.0}


def test_lora_trainable_parameters_hand_computed():
    cfg = compose_cfg("model=qwen7b", "peft=lora")
    h, kv, f, L = 3584, 4 * 128, 18944, 28
    per_layer = 16 * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + f) + (f + h))
    assert lora.trainable(cfg) == per_layer * L
    x = plan_inputs("model=qwen7b", "peft=lora", "topology=1x8")
    states = memory.model_states(x)
    assert states["weights"] == 2 * P7 + 4 * x.lora_params  # frozen bf16 base + fp32 adapters
    assert states["optimizer"] == 8 * x.lora_params


def test_activation_logit_and_kv_components_hand_computed():
    x = plan_inputs(
        "model=qwen7b",
        "topology=1x8",
        "trainer.per_device_train_batch_size=2",
        "trainer.max_completion_length=1024",
        "data.max_prompt_length=512",
        "trainer.activation_checkpointing=false",
    )
    c = memory.estimate_train(x).components
    s, h, q, kv, f, V, C = 1536, 3584, 3584, 512, 18944, 152064, 1024
    c_h, c_q, c_kv, c_f, _ = activations.ACTIVATION_BYTES_PER_TOKEN["bf16"]  # qwen2: no q/k norm
    # + GQA keys/values repeated (padding)
    per_layer = 2 * s * (c_h * h + c_q * q + c_kv * kv + c_f * f + 2 * (q - kv) * 2)
    assert c["activations"] == pytest.approx(28 * per_layer)
    # trl's fused LM head on a GPU: the completion tokens' tile, fp32 per-token stats, d(hidden) and d(weight) in fp32
    tokens = 2 * C
    assert c["logits"] == pytest.approx(
        2 * s * h * 8 + min(tokens, 4096) * 32768 * 2 + 6 * tokens * 4 + tokens * h * 4 + V * h * 4
    )
    assert c["kv_cache"] == 2 * 28 * kv * 2 * s * 2  # vllm off: generate() holds K and V for 2 sequences
    with_ckpt = memory.estimate_train(dataclasses.replace(x, checkpointing=True)).components
    assert with_ckpt["activations"] == pytest.approx(28 * 2 * s * h * 2 + per_layer)


def test_lora_keeps_the_lm_head_frozen_so_no_fp32_weight_gradient():
    full = memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8")).components["logits"]
    lora = memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8", "peft=lora")).components["logits"]
    assert full - lora == pytest.approx(152064 * 3584 * 4)


def test_deepspeed_buffers_follow_the_deepspeed_group():
    def buffers(*o):
        return memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8", *o)).components["deepspeed_buffers"]

    assert buffers() == 0
    assert buffers("deepspeed=zero2") == 3584**2 * 2  # reduce_bucket_size "auto" = hidden^2 elements
    assert buffers("deepspeed=zero2", "deepspeed.zero_optimization.reduce_bucket_size=5e8") == 5e8 * 2
    assert buffers("deepspeed=zero2", "deepspeed.zero_optimization.overlap_comm=true") == 2 * 3584**2 * 2
    live = 152064 * 3584 + 0.9 * 3584**2  # the LM head (largest) + the prefetch bucket
    assert buffers("deepspeed=zero3") == pytest.approx(live * 2 + 3584**2 * 2)
    assert buffers("deepspeed=zero3", "deepspeed.zero_optimization.stage3_max_live_parameters=1e8") == pytest.approx(
        1e8 * 2 + 3584**2 * 2
    )


def test_reference_model_only_with_beta_and_no_lora():
    assert (
        memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8", "trainer.beta=0.04")).components[
            "reference_model"
        ]
        == 2 * P7
    )
    assert (
        memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8", "trainer.beta=0.04", "peft=lora")).components[
            "reference_model"
        ]
        == 0
    )
    assert memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8")).components["reference_model"] == 0


def test_zero3_gathers_the_whole_model_for_generate_or_lora_weight_sync():
    def gather(*o):
        return memory.estimate_train(plan_inputs("model=qwen7b", "topology=1x8", "deepspeed=zero3", *o)).components[
            "zero3_gather"
        ]

    assert gather() == 2 * P7  # generate() with ds3_gather_for_generation
    assert gather("vllm=colocate", "peft=lora") == 2 * P7  # sync_weights merges adapters into a gathered model
    assert gather("vllm=colocate") == 4 * 152064 * 3584  # one parameter at a time: the largest layer


def test_vllm_server_engine_kv_budget():
    """vLLM >= 0.21: weights, profile activations, non-torch memory, CUDA graphs and the KV cache all inside
    gpu_memory_utilization x capacity; the weight-transfer buffers come after start-up, on top."""
    x = plan_inputs("model=qwen7b", "topology=2x8", "vllm=server")
    engine = memory.estimate_vllm_engine(x)
    c = engine.components
    assert c["weights"] == 2 * P7 and c["cuda_graphs"] > 0
    inside = c["weights"] + c["profile_activations"] + c["non_torch"] + c["cuda_graphs"]
    assert c["kv_cache"] == pytest.approx(0.9 * 80 * GIB - inside)
    assert engine.peak == pytest.approx(0.9 * 80 * GIB + vllm_engine.WEIGHT_SYNC_BUFFERS) and engine.fits
    assert vllm_engine.kv_bytes_per_token(x) == 2 * 28 * 4 * 128 * 2  # 56 KiB/token, as vLLM computes it


def test_vllm_engine_that_cannot_hold_one_sequence_is_an_oom():
    p = planned(
        "model=qwen7b", "topology=2x8", "vllm=server", "vllm.gpu_memory_utilization=0.2", "topology.gpu_memory_gib=80"
    )
    e = memory.estimate(p.inputs)
    assert not e.fits and "KV cache" in " ".join(e.vllm.notes)
    ranked = p.memory.suggestions
    assert ranked[0]["fits"] and ranked[0]["key"] in (
        "vllm.gpu_memory_utilization",
        "vllm.max_model_length",
        "vllm.tensor_parallel_size",
    )


# A server whose weights are too large for one GPU (qwen3-next-80b-a3b: 148 GiB at 16 bits), on node 0 of a
# training cluster, every node (topology.symmetric), with FSDP2 sharding per node, and on a dedicated serving node:
# the tensor parallelism offered, and the overrides that apply it.
TOO_LARGE = "model=qwen3-next-80b-a3b"
SERVER_TP_CASES = {
    "node0": ((TOO_LARGE, "topology=4x8", "deepspeed=zero3", "vllm=server"), 4, ("vllm.gpus=4",)),
    "symmetric": ((TOO_LARGE, "topology=4x8", "topology.symmetric=true", "vllm=server"), 4, ("vllm.gpus=4",)),
    "fsdp_node": (
        (TOO_LARGE, "topology=2x8", "topology.symmetric=true", "fsdp=full_shard", "fsdp.shard_group=node")
        + ("vllm=server", "vllm.gpus=2"),
        4,
        ("vllm.gpus=4",),
    ),
    "serving_node": ((TOO_LARGE, "topology=4x8", "deepspeed=zero3", "vllm=server", "vllm.nodes=1"), 4, ()),
}


@pytest.mark.parametrize("case", fast_lane(list(SERVER_TP_CASES), lambda c: c == "node0"))
def test_a_server_too_large_for_its_gpu_is_offered_the_tensor_parallelism_that_fits(case, capsys):
    """The engine that cannot load its weights is planned at what starting needs, said once, and the fix is the
    smallest tensor parallelism whose server GPU fits, with the training ranks it takes: what the fix plans is
    exactly the plan of the overrides it names."""
    overrides, tp, applied = SERVER_TP_CASES[case]
    before = planned(*overrides)
    engine = vllm_engine.estimate(before.inputs, server=True)
    assert not engine.starts and engine.components["weights"] > before.inputs.capacity
    assert before.memory.vllm["peak_gib"] == pytest.approx(engine.needs / GIB)  # not capped at the GPU's 80 GiB
    (fix,) = [s for s in before.memory.suggestions if s["key"] == "vllm.tensor_parallel_size"]
    assert fix["value"] == tp and fix["text"].startswith(" ".join((f"vllm.tensor_parallel_size={tp}", *applied)))
    (change,) = fixes._server_tensor_parallel(before.inputs, before.plan)
    after = planned(*overrides, f"vllm.tensor_parallel_size={tp}", *applied)
    assert change[2] == after.inputs  # the world, FSDP's shard group and the server's GPUs, as the re-plan has them
    assert after.memory.vllm["fits"] and fix["fits"] == after.memory.fits
    report.print_plan(before.memory)
    assert capsys.readouterr().out.count("its weights alone take") == 1  # under its table, not again as a note


def test_a_larger_server_tensor_parallelism_divides_the_heads_and_stays_on_a_node():
    p = planned(TOO_LARGE, "topology=4x8", "deepspeed=zero3", "vllm=server")
    six_heads = dataclasses.replace(p.inputs, heads=6)
    assert [c[1] for c in fixes._server_tensor_parallel(six_heads, p.plan)] == [2]  # 6 % 4 != 0
    # a two-GPU node leaves its server one GPU, the other trains: no larger size, so no such fix is offered
    p2 = planned(TOO_LARGE, "topology=1x2", "vllm=server")
    assert not p2.memory.vllm["fits"] and fixes._server_tensor_parallel(p2.inputs, p2.plan) == []
    assert all(s["key"] != "vllm.tensor_parallel_size" for s in p2.memory.suggestions)


def test_a_colocated_engine_its_share_cannot_hold_is_offered_tensor_parallelism_and_a_larger_share():
    """qwen14b's 27.5 GiB of weights in TRL's colocated share of 0.3 x 80 GiB: vLLM would not start. Fixes: TRL's
    TP groups (the weights split over 2 ranks, the engine generating for both) or a larger share, each re-planned
    for real; and a GPU that cannot hold the trainer and the engine together is planned at what that takes."""
    overrides = ("model=qwen14b", "peft=lora", "deepspeed=zero3", "topology=1x8", "vllm=colocate")
    before = planned(*overrides)
    assert not before.memory.fits and "its weights alone take 27.51 GiB" in " ".join(before.memory.errors)
    fixes_by_key = {s["key"]: s for s in before.memory.suggestions}
    tp, share = fixes_by_key["vllm.tensor_parallel_size"], fixes_by_key["vllm.gpu_memory_utilization"]
    assert tp["value"] == 2 and tp["fits"] and share["fits"] and share["value"] > 0.3
    (change,) = fixes._colocated_tensor_parallel(before.inputs, before.plan.gpus_per_node)
    assert change[2] == planned(*overrides, "vllm.tensor_parallel_size=2").inputs  # max_num_seqs doubles with it
    assert planned(*overrides, f"vllm.gpu_memory_utilization={share['value']}").memory.fits
    # without ZeRO-3 the trainer holds all 64 GiB of qwen32b: the GPU would need that and the engine's weights
    x = plan_inputs("model=qwen32b", "peft=lora", "topology=1x8", "vllm=colocate")
    train, engine = memory.estimate(x).train, vllm_engine.estimate(x, server=False)
    held = memory.resident_at_engine_start(x, train) + engine.components["weights"]
    assert held > x.capacity and train.phases["generate"] > held


def test_a_change_that_saves_nothing_is_no_fix():
    # gpt-oss-20b's prompt is a sliver of its colocated OOM: data.max_prompt_length=16 saved "0.0 GiB"
    ranked = planned("model=gpt-oss-20b", "topology=1x8", "vllm=colocate", "deepspeed=zero3").memory.suggestions
    assert ranked and all(s["fits"] or s["saves_gib"] >= 0.05 for s in ranked)
    assert not any("saves 0.0 GiB" in s["text"] for s in ranked)


@pytest.mark.parametrize(
    "field,values",
    [
        ("batch", [1, 2, 4, 8, 16]),
        ("completion", [64, 256, 1024, 4096]),
        ("prompt", [64, 512, 2048]),
        ("steps_per_generation", [1, 2, 4]),
    ],
)
@pytest.mark.parametrize("variant", fast_lane(["ddp", "zero3", "colocate", "lora_ckpt"], lambda v: v == "zero3"))
def test_more_batch_or_length_never_lowers_a_peak(field, values, variant):
    overrides = {
        "ddp": [],
        "zero3": ["deepspeed=zero3"],
        "colocate": ["vllm=colocate"],
        "lora_ckpt": ["peft=lora", "trainer.activation_checkpointing=true"],
    }[variant]
    x = plan_inputs("model=qwen7b", "topology=1x8", *overrides)
    previous = None
    for value in values:
        phases = memory.estimate_train(dataclasses.replace(x, **{field: value})).phases
        if previous is not None:
            assert all(phases[p] >= previous[p] for p in phases), (field, value)
        previous = phases


MODELS = [m for m in group_options("model") if m not in ("tiny", "auto")]  # auto: numbers come from a model dir
TOPOLOGIES = ["1x1", "1x2", "1x4", "1x8", "2x8", "4x8"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,topology",
    # make test: every model once, the topologies in turn (each about 4 times); make test-matrix: every pair
    matrix(list(itertools.product(MODELS, TOPOLOGIES)), lambda c: TOPOLOGIES.index(c[1]) == MODELS.index(c[0]) % 6),
)
def test_every_shipped_model_and_topology_plans(model, topology):
    for vllm in ("off", "colocate") + (("server",) if topology not in ("1x1",) else ()):
        cfg = compose_cfg(f"model={model}", f"topology={topology}", f"vllm={vllm}")
        memory = planner.memory_plan(cfg, placement.make_plan(cfg, "/x/config.yaml", detected_gpus=0))
        engine_fits = memory.vllm is None or memory.vllm["peak_gib"] <= memory.vllm["capacity_gib"]
        assert memory.train["peak_gib"] > 0
        assert memory.fits == (memory.train["peak_gib"] <= memory.train["capacity_gib"] and engine_fits)
        assert (memory.vllm is not None) == (vllm == "server")
        if not memory.fits:
            assert memory.suggestions, (model, topology, vllm)


def test_known_cases_verdicts():
    fits = plan_inputs("model=qwen0.5b", "topology=1x8")
    assert memory.estimate(fits).fits
    # the seeds: Qwen2.5-7B full fine-tune on 24 GB cards does not fit without ZeRO/LoRA
    seed = plan_inputs(
        "model=qwen7b", "topology=1x4", "topology.gpu_memory_gib=24", "vllm=colocate", "vllm.gpu_memory_utilization=0.6"
    )
    assert not memory.estimate(seed).fits
    p = planned(
        "model=qwen7b",
        "topology=1x8",
        "trainer.per_device_train_batch_size=16",
        "trainer.max_completion_length=2048",
        "trainer.activation_checkpointing=false",
    )
    big, ranked = p.inputs, p.memory.suggestions
    first = ranked[0]
    assert first["fits"] and first["key"] == "trainer.per_device_train_batch_size"
    assert memory.estimate(dataclasses.replace(big, batch=first["value"])).fits
    assert not memory.estimate(dataclasses.replace(big, batch=first["value"] + 1)).fits
    ckpt = next(s for s in ranked if s["key"] == "trainer.activation_checkpointing")
    assert ckpt["saves_gib"] > 100


def test_action_plan_prints_the_breakdown_and_writes_memory_fields(tmp_path, capsys):
    import json

    run_dir = tmp_path / "run"
    overrides = ("model=qwen7b", "topology=1x8", "trainer.per_device_train_batch_size=16")
    checkpointing = "trainer.activation_checkpointing=false"
    ended = run_job(*overrides, "trainer.max_completion_length=2048", checkpointing, "action=plan", run_dir=run_dir)
    out = capsys.readouterr().out
    assert ended.code == 0
    assert "train: peak per GPU" in out and "OOM" in out and "what would fit" in out
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["fits"] is False and plan["errors"] == []
    assert set(plan["train"]) >= {"peak_gib", "capacity_gib", "components_gib", "phases_gib"}
    # beta 0, generation and steps aligned: TRL scores nothing without gradients, so no score phase is planned
    assert set(plan["train"]["phases_gib"]) == {"generate", "reward", "train", "optimizer"}
    # no engine memory
    assert plan["vllm"] == {
        "mode": "off",
        "server_node": None,
        "nodes": 0,
        "gpus": 0,
        "tensor_parallel_size": 1,
        "weight_sync": None,
    }
    assert plan["suggestions"][0]["fits"]


def test_run_refuses_a_predicted_oom_with_exit_3(tmp_path):
    # 12k completions per CPU process of the tiny model would need more RAM than this machine has
    run_dir = tmp_path / "run"
    ended = run_job(
        "logger=none",
        "trainer.per_device_train_batch_size=16384",
        "trainer.num_generations=4",
        "data.num_samples=8192",
        run_dir=run_dir,
    )
    assert ended.code == 3
    import json

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "predicted_oom" and summary["exit_code"] == 3
    assert summary["suggestions"] and not (run_dir / "train.log").exists()


@pytest.mark.parametrize("sub_group", [None, 2_000_000_000, 100_000_000])
def test_zero3_fp32_gradients_follow_deepspeeds_sub_groups(sub_group):
    """bf16 ZeRO-3 at the optimizer step: 16 bytes/param/N of states plus fp32 gradients for one
    sub-group at a time (deepspeed/runtime/zero/stage3.py), not 20 bytes/param/N."""
    P, N = 32763876352, 8  # Qwen2.5-32B on one 8-GPU node
    extra = [f"++deepspeed.zero_optimization.sub_group_size={sub_group}"] if sub_group else []
    states = memory.model_states(plan_inputs("model=qwen32b", "topology=1x8", "deepspeed=zero3", *extra))
    assert sum(states.values()) == pytest.approx(16 * P / N + 4 * min(P / N, sub_group or 1e9))


def test_on_oom_fit_keeps_the_experiment_and_records_the_change(tmp_path):
    from omegaconf import OmegaConf

    run_dir = tmp_path / "run"
    ended = run_job(
        "action=plan",
        "trainer.per_device_train_batch_size=4096",
        "trainer.num_generations=4",
        "data.num_samples=4096",  # one generation batch's prompts
        "memory.limit_gib=3",
        "trainer.steps_per_generation=2",
        "preflight.on_oom=fit",
        run_dir=run_dir,
    )
    assert ended.code == 0
    import json

    assert json.loads((run_dir / "plan.json").read_text())["fits"] is True
    t = OmegaConf.load(run_dir / "config.yaml")
    assert t.trainer.per_device_train_batch_size < 4096
    # the batch per optimizer step
    assert t.trainer.per_device_train_batch_size * t.trainer.gradient_accumulation_steps == 4096
    assert t.trainer.per_device_train_batch_size * t.trainer.steps_per_generation == 4096 * 2  # the generation batch
    assert t.preflight.fitted[0].startswith("trainer.per_device_train_batch_size: 4096 -> ")


def test_on_oom_fit_refuses_when_nothing_keeps_the_experiment(tmp_path, caplog):
    ended = run_job(
        "logger=none",
        "trainer.per_device_train_batch_size=2",
        "trainer.num_generations=2",
        "topology.cpu_procs=1",
        "model=qwen72b",
        "model.name_or_path=null",
        "memory.limit_gib=2",
        "preflight.on_oom=fit",
        run_dir=tmp_path / "run",
    )
    assert ended.code == 3 and "no change that keeps the experiment the same fits" in caplog.text


def test_calibration_fit_recovers_factors_and_holds_a_floor():
    from grpo_exp.planning import calibration

    true = {"states": 1.2, "activations": 0.8, "logits": 0.5}
    parts = [(1.0, 0.5, 0.2), (1.0, 2.0, 0.3), (1.0, 0.7, 1.5), (1.0, 3.0, 2.0)]
    samples = [{"states": a, "activations": b, "logits": c, "other": 0.1} for a, b, c in parts]
    for s in samples:
        s["measured"] = calibration.predict(s, true)
    assert calibration.fit(samples) == pytest.approx(true)
    for s in samples:  # logits cost nothing measured: held at the floor, the others refitted exactly
        s["measured"] = calibration.predict(s, {**true, "logits": 0.0})
    fitted = calibration.fit(samples)
    assert fitted["logits"] == calibration.FLOOR
    assert [calibration.predict(s, fitted) for s in samples] == pytest.approx([s["measured"] for s in samples], rel=0.1)


def test_calibration_frees_fewer_factors_than_it_has_runs():
    """Three factors through three runs fit them exactly, whatever is true (the H200 records of 2026-11-28 came out as
    states 0.08, logits 17.9): the group that varies least across the runs stays 1.0."""
    from grpo_exp.planning import calibration

    parts = [(20.0, 1.0, 1.00), (28.0, 1.9, 1.05), (28.0, 2.1, 1.10)]
    samples = [{"states": a, "activations": b, "logits": c} for a, b, c in parts]
    for s, noise in zip(samples, (0.3, -0.2, 0.1), strict=True):
        s["measured"] = calibration.predict(s, {}) + noise
    fitted = calibration.fit(samples)
    assert fitted["logits"] == 1.0 and 0.9 < fitted["states"] < 1.1 and fitted["activations"] != 1.0
    assert calibration.fit(samples[:2]) == {
        "states": pytest.approx(fitted["states"], abs=0.05),
        "activations": 1.0,
        "logits": 1.0,
    }


def test_the_plan_knows_an_agentic_runs_episodes():
    """plan.json's env: the tools the model sees, its rounds, and the episodes alive on each rank (its share of
    a generation batch: per_device_train_batch_size x steps_per_generation); the notes say what bounds them."""
    p = planned("env=number_game", "model=qwen7b", "topology=1x8", "vllm=colocate", "data.max_prompt_length=256")
    t = p.cfg.trainer
    assert t.steps_per_generation is None  # GRPOConfig's default: gradient_accumulation_steps
    assert p.memory.env == {
        "name": "number_game",
        "tools": ["guess"],
        "environments": None,
        "max_tool_calling_iterations": 3,
        "max_completion_length": 96,
        "instances_per_rank": t.per_device_train_batch_size * t.gradient_accumulation_steps,
    }
    notes = " ".join(p.memory.notes)
    assert "bounds the whole episode" in notes and "up to 3 per episode" in notes
    assert "prompt + episode (352 tokens)" in notes
    assert planned("model=qwen7b", "topology=1x8").memory.env is None
