"""Hangs prevented: the startup guard and the fingerprint every node compares."""

import json

import pytest

from grpo_exp.config import fingerprint
from grpo_exp.training import guards
from tests.helpers import compose_cfg


@pytest.mark.parametrize(
    "visible,vllm,n_gpu,problem",
    [
        (["1", "2", "3"], "0", 1, None),
        (["0", "1", "2"], "0", 1, "includes GPU(s) ['0'] reserved for the vLLM server"),
        (["0", "1"], "", 2, "nn.DataParallel"),
        (None, None, 1, None),
    ],
)
def test_startup_guard(visible, vllm, n_gpu, problem):
    problems = guards.placement_problems(visible, vllm, n_gpu)
    assert (problem is None and not problems) or (problem and problem in " ".join(problems))


def test_fingerprint_differences_name_nodes_and_keys():
    cfg = compose_cfg()
    base = fingerprint.fingerprint(cfg)
    other = json.loads(json.dumps(base))
    other["node_rank"] = 1
    other["config"]["vllm.mode"] = "colocate"
    other["facts"]["version.trl"] = "0.0.1"
    lines = fingerprint.differences([base, base, other])
    assert any(
        line.startswith("vllm.mode differs between nodes: node(s) [0]: 'off'; node(s) [1]: 'colocate'")
        for line in lines
    )
    assert any(line.startswith("version.trl differs") for line in lines) and len(lines) == 2
    assert fingerprint.differences([base, base]) == []


def test_node_rank_is_not_part_of_the_fingerprint():
    assert (
        fingerprint.fingerprint(compose_cfg("topology.node_rank=0"))["config"]
        == fingerprint.fingerprint(compose_cfg("topology.node_rank=1"))["config"]
    )
