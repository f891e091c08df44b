"""vLLM on CPU ranks, as planned and checked before launch (the runs themselves are in the vLLM lane,
tests/vllm/): the CPU engine's memory by vLLM's CPU rules, the weight sync through files, the server's place
and environment, and the settings refused on CPU with the key and the fix."""

import dataclasses

import pytest

from grpo_exp import GIB
from grpo_exp.planning import inputs, vllm_engine
from tests.helpers import compose_cfg, planned, problems


def test_a_colocated_cpu_engine_is_its_weights_its_kv_space_and_its_runtime():
    p = planned("action=plan", "vllm=colocate", "vllm.cpu_kv_cache_gib=2")
    engine = p.memory.vllm_engine["components_gib"]
    m = p.cfg.model
    assert engine["kv_cache"] == 2.0 and engine["weights"] == pytest.approx(m.num_parameters * 2 / GIB)  # bf16
    assert engine["runtime"] == vllm_engine.CPU_COLOCATED_RUNTIME / GIB
    # K and V of each layer at 16 bits: 2 x layers x kv_heads x head_dim x 2 bytes a token (vLLM logs the count)
    per_token = 2 * m.num_hidden_layers * m.num_key_value_heads * m.head_dim * 2
    assert p.memory.vllm_engine["kv_tokens"] == 2 * GIB / per_token
    assert p.memory.train["components_gib"]["vllm_colocated"] == pytest.approx(sum(engine.values()))
    assert any("VLLM_CPU_KVCACHE_SPACE=2" in n for n in p.memory.notes)


def test_a_cpu_server_is_host_ram_of_its_node_and_syncs_through_files():
    p = planned("action=plan", "vllm=server")
    m = p.cfg.model
    server = p.memory.vllm["components_gib"]
    assert server["weights"] == pytest.approx(m.num_parameters * 4 / GIB)  # the server's --dtype: float32
    assert server["runtime"] == vllm_engine.CPU_SERVER_RUNTIME / GIB and "weight_sync_buffers" not in server
    host = p.memory.host[0]["components_gib"]
    assert host["vllm_server"] == pytest.approx(p.memory.vllm["peak_gib"])
    sync = p.memory.weight_sync
    assert sync["method"] == "filesystem" and sync["bytes"] == m.num_parameters * 4
    assert sync["write_s"] == sync["bytes"] / sync["disk_bytes_per_s"]
    train = p.memory.train["components_gib"]
    assert train["weight_sync_copy"] == pytest.approx(sync["disk_gib"]) and train["weight_sync_buffers"] == 0
    assert "--worker-extension-cls" in p.plan.nodes[0].commands["vllm"]


def test_gpu_servers_keep_nccl_unless_asked():
    nccl = planned("action=plan", "model=qwen7b", "topology=1x8", "vllm=server", gpus=8)
    assert nccl.memory.weight_sync == {"method": "nccl", "buffers_gib": 2.0}
    assert "--worker-extension-cls" not in nccl.plan.nodes[0].commands["vllm"]
    files = planned("action=plan", "model=qwen7b", "topology=1x8", "vllm=server", "vllm.weight_sync=filesystem", gpus=8)
    assert files.memory.weight_sync["disk_gib"] == pytest.approx(files.cfg.model.num_parameters * 2 / GIB)
    assert files.memory.host[0]["components_gib"]["weight_sync_copy"] == files.memory.weight_sync["disk_gib"]
    assert files.memory.vllm["components_gib"].get("weight_sync_buffers", 0) == 0  # no NCCL buffers on the server


@pytest.mark.parametrize(
    "overrides,key,fix",
    [
        (("vllm=server", "vllm.weight_sync=nccl"), "vllm.weight_sync", "vllm.weight_sync=filesystem"),
        (("vllm=server", "vllm.weight_sync=rsync"), "vllm.weight_sync", "auto, nccl, filesystem"),
        (("vllm=colocate", "vllm.enable_sleep_mode=true"), "vllm.enable_sleep_mode", "false on CPU"),
        (("vllm=colocate", "vllm.cpu_kv_cache_gib=0"), "vllm.cpu_kv_cache_gib", "1 or more"),
    ],
)
def test_what_cpu_ranks_cannot_run_is_refused_with_the_key_and_the_fix(overrides, key, fix):
    found = [p for p in problems("action=plan", *overrides) if p.key == key]
    assert found and fix in found[0].fix, found


def test_a_context_the_cpu_kv_space_cannot_hold_is_a_start_failure():
    p = planned("action=plan", "vllm=colocate")
    x = dataclasses.replace(inputs.inputs(p.cfg, p.plan), vllm_max_len=10**8)
    engine = vllm_engine.estimate_cpu(x, server=False)
    assert not engine.starts and "vllm.cpu_kv_cache_gib" in engine.notes[0]


def test_the_tiny_model_serves_on_cpu_attention():
    """vLLM's CPU attention takes head sizes 32, 64, 80, ... and its Qwen2 reads hidden_size / heads."""
    m = compose_cfg().model
    assert m.hidden_size // m.num_attention_heads == m.head_dim >= 32 and m.head_dim % 16 == 0
