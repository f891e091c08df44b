"""FSDP2 in the planner (states sharded over the shard group, the gathered units, TRL's full_tensor calls, CPU
offload) and host RAM per node (offloaded states, sleeping vLLM weights, checkpoint loading, processes):
hand-computed terms, verdicts against topology.host_memory_gib and the ranked fixes."""

import dataclasses

import pytest

from grpo_exp.planning import fixes, host_memory, memory
from tests.helpers import planned

GIB = 2**30
P7 = 7615616512  # Qwen2.5-7B
H, V, L = 3584, 152064, 28
LAYER = 2 * H * 3584 + 2 * H * 512 + 3 * H * 18944  # q, o, k, v, gate, up, down


def _x(*overrides):
    return planned("model=qwen7b", "topology=1x8", *overrides).inputs


def test_fsdp2_shards_every_state_over_the_world_hand_computed():
    x = _x("fsdp=full_shard")
    assert x.fsdp and x.fsdp_shard == 8 and x.dtype_bytes == 2
    # bf16 weights, gradients and AdamW's two moments, each a DTensor shard of 1/8
    assert memory.model_states(x) == {
        "weights": 2 * P7 / 8,
        "gradients": 2 * P7 / 8,
        "fp32_gradients": 0.0,
        "optimizer": 4 * P7 / 8,
    }
    c = memory.estimate_train(x).components
    # root unit (embedding + untied LM head) and two decoder layers gathered in bf16, one layer's gradients
    assert c["fsdp_buffers"] == (2 * V * H + 2 * LAYER) * 2 + LAYER * 2
    assert c["fsdp_full_tensor"] == V * H * 2  # trl's lm_head.weight.full_tensor() for the log-probs
    assert c["deepspeed_buffers"] == 0 and c["zero3_gather"] == 0


def test_reshard_after_forward_false_keeps_every_layer_gathered_until_backward():
    resharded, kept = (
        memory.estimate_train(_x("fsdp=full_shard")),
        memory.estimate_train(_x("fsdp=full_shard", "fsdp.reshard_after_forward=false")),
    )
    gained = kept.components["fsdp_buffers"] - resharded.components["fsdp_buffers"]
    assert gained == (L - 2) * LAYER * 2
    assert kept.phases["train"] > resharded.phases["train"]


def test_hybrid_shard_divides_by_one_nodes_ranks():
    full, hybrid = _x("topology=2x8", "fsdp=full_shard"), _x("topology=2x8", "fsdp=hybrid_shard")
    assert (full.fsdp_shard, hybrid.fsdp_shard) == (16, 8)
    assert memory.model_states(hybrid)["optimizer"] == 2 * memory.model_states(full)["optimizer"]


def test_fsdp2_lowers_a_full_fine_tunes_peak_and_offload_moves_its_states_to_the_host():
    none, fsdp = (
        planned("model=qwen7b", "topology=1x8", "vllm=server"),
        planned("model=qwen7b", "topology=1x8", "vllm=server", "fsdp=full_shard"),
    )
    assert 0 < fsdp.memory.train["peak_gib"] < 0.6 * none.memory.train["peak_gib"]
    offload = _x("fsdp=full_shard_offload")
    assert memory.model_states(offload) == {"weights": 0.0, "gradients": 0.0, "fp32_gradients": 0.0, "optimizer": 0.0}
    host = host_memory.offloaded_per_rank(offload)
    assert host["offloaded_states"] == 4 * 2 * P7 / 8  # weights + gradients + 2 moments, bf16, per rank's shard


def test_the_reference_model_is_sharded_under_fsdp2():
    x = _x("fsdp=full_shard", "trainer.beta=0.04")
    assert memory.estimate_train(x).components["reference_model"] == 2 * P7 / 8


def test_fsdp_fixes_are_offered_and_never_beside_deepspeed():
    p = planned("model=qwen72b", "topology=1x8", "deepspeed=none")
    keys = [(s["key"], s["value"]) for s in fixes.suggest(dataclasses.replace(p.inputs, capacity=80 * GIB), p.plan)]
    assert ("fsdp", "full_shard") in keys
    p = planned("model=qwen72b", "topology=1x8", "fsdp=full_shard")
    keys = [(s["key"], s["value"]) for s in fixes.suggest(dataclasses.replace(p.inputs, capacity=10 * GIB), p.plan)]
    assert ("fsdp", "full_shard_offload") in keys and not any(k == "deepspeed" for k, _ in keys)


# --- host RAM per node -------------------------------------------------------------------------------------


def test_zero3_offload_host_ram_hand_computed_and_the_verdict_follows_host_memory_gib():
    short = planned(
        "model=qwen7b", "topology=1x8", "vllm=server", "deepspeed=zero3_offload", "topology.host_memory_gib=64"
    )
    [node] = short.memory.host
    c = node["components_gib"]
    trainers = 7  # the server has GPU 0
    assert c["offloaded_states"] == pytest.approx(16 * P7 / GIB)  # DeepSpeed's 16 bytes per parameter, over the node
    assert c["offloaded_weights"] == pytest.approx(2 * P7 / GIB)
    runtime = trainers * host_memory.HOST_RUNTIME_GPU_RANK + host_memory.HOST_RUNTIME_VLLM_SERVER
    assert c["runtime"] == pytest.approx((runtime + host_memory.HOST_RUNTIME_VLLM_WORKER) / GIB)
    assert node["capacity_gib"] == 64 and not node["fits"] and not short.memory.fits
    assert any("host RAM of node 0: needs" in e for e in short.memory.errors)
    fixes_text = [e for e in short.memory.errors if "short:" in e]
    assert "deepspeed=zero3 (no offload)" in fixes_text[0]  # the largest term first
    roomy = planned(
        "model=qwen7b", "topology=1x8", "vllm=server", "deepspeed=zero3_offload", "topology.host_memory_gib=2048"
    )
    assert roomy.memory.fits and roomy.memory.host[0]["fits"]


def test_a_cluster_without_host_memory_gib_is_planned_not_checked_and_this_machine_is_detected():
    cluster = planned("model=qwen7b", "topology=1x8", "deepspeed=zero3_offload")
    assert cluster.memory.host[0]["capacity_gib"] is None and cluster.memory.host[0]["fits"]
    assert any("topology.host_memory_gib is null" in n for n in cluster.memory.notes)
    import psutil

    local = planned()  # topology=local on CPU: this machine's RAM, the ranks' own plans added up
    [node] = local.memory.host
    assert node["capacity_gib"] == pytest.approx(psutil.virtual_memory().total / GIB)
    assert node["components_gib"]["training_processes"] == pytest.approx(2 * local.memory.train["peak_gib"])


def test_sleeping_colocated_vllm_parks_its_weights_in_host_ram():
    awake = planned("model=qwen7b", "topology=1x8", "vllm=colocate").memory.host[0]["components_gib"]
    asleep = planned("model=qwen7b", "topology=1x8", "vllm=colocate", "vllm.enable_sleep_mode=true")
    assert awake["vllm_sleeping_weights"] == 0
    assert asleep.memory.host[0]["components_gib"]["vllm_sleeping_weights"] == pytest.approx(8 * 2 * P7 / GIB)


def test_checkpoint_loading_binds_without_ram_efficient_loading_and_the_fix_says_so():
    every_rank = planned("model=qwen7b", "topology=1x8", "fsdp=full_shard", "topology.host_memory_gib=64")
    [node] = every_rank.memory.host
    assert node["components_gib"]["checkpoint_load"] == pytest.approx(8 * 2 * P7 / GIB) and not node["fits"]
    assert any("fsdp.cpu_ram_efficient_loading=true" in e for e in every_rank.memory.errors)
    rank0 = planned(
        "model=qwen7b",
        "topology=1x8",
        "fsdp=full_shard",
        "fsdp.cpu_ram_efficient_loading=true",
        "topology.host_memory_gib=64",
    )
    assert rank0.memory.host[0]["components_gib"]["checkpoint_load"] == pytest.approx(2 * P7 / GIB)
    assert rank0.memory.fits


def test_nodes_alike_are_reported_once_with_their_indices():
    many = planned("model=qwen7b", "topology=4x8", "fsdp=full_shard", "fsdp.cpu_ram_efficient_loading=true")
    assert [h["nodes"] for h in many.memory.host] == [[0], [1, 2, 3]]  # node 0 reads the checkpoint


def test_calibration_fits_the_host_runtime_of_gpu_nodes_from_their_measured_rss():
    """A GPU node's measured RSS less the planned offloaded terms, against the planned runtime: host_runtime,
    which then scales the runtime term (and nothing exact: offloaded states stay as they are)."""
    from grpo_exp.core import metrics
    from grpo_exp.planning import calibration, plan_file
    from grpo_exp.results import calibrate

    found = planned("model=qwen7b", "topology=1x8", "deepspeed=zero3_offload")
    keys = plan_file.summary_keys(found.memory.to_dict())
    runtime, peak = keys["plan/host/runtime_gib"], keys["plan/host/peak_gib"]
    summary = {**keys, metrics.peak("train", metrics.NODE_RSS): peak + runtime / 2}  # runtime 1.5x the typical
    sample = calibrate.host_sample(summary)
    assert sample == {"logged": pytest.approx(1.5 * runtime), "planned": runtime}
    factor = calibration.fit_ratio([sample])
    assert factor == pytest.approx(1.5) and calibrate.host_sample({}) is None
    x = found.inputs
    gpu = memory.estimate_train(x)
    plain = host_memory.estimate_node(x, gpu, 0, 8, 0, None)
    fitted = host_memory.estimate_node(
        dataclasses.replace(x, calibration=((calibration.HOST, factor),)), gpu, 0, 8, 0, None
    )
    assert fitted.components["runtime"] == pytest.approx(1.5 * plain.components["runtime"])
    assert fitted.components["offloaded_states"] == plain.components["offloaded_states"]


def test_a_run_whose_node_lacks_host_ram_is_refused_before_launch(tmp_path):
    """The GPUs fit; the node's RAM does not: exit 3, predicted_oom, the node and its shortfall named."""
    from grpo_exp.core import rundir
    from tests.helpers import run_job

    run_dir = tmp_path / "run"
    ended = run_job(
        "logger=none",
        "model=qwen7b",
        "topology=1x8",
        "deepspeed=zero3_offload",
        "topology.host_memory_gib=64",
        run_dir=run_dir,
        gpus=8,
    )
    summary = rundir.read_summary(run_dir)
    assert ended.code == 3 and summary["status"] == "predicted_oom"
    assert "host RAM of node 0: needs" in summary["error"]
    assert rundir.read_json(run_dir / rundir.PLAN)["train"]["fits"]  # the GPUs alone would fit
