"""vllm=server under launcher=slurm with real vLLM: the job's task on the local one-node cluster starts `vllm serve`
from the plan's argv, waits for it, trains, and syncs its weights through files (scripts/slurm_local.sh sets the
cluster up; .ci/run does before the lanes). Skipped, with the reason, where no cluster answers. A dedicated serving
node needs a second SLURM node, which one machine does not have: the two-driver rehearsal on loopback
(test_serving_node.py) runs it."""

import json

import pytest

from grpo_exp.core import rundir
from tests.launching.test_slurm_real import SLURM, needs_cluster  # noqa: F401 (the fixture, used by name)

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("needs_cluster")]


def test_a_slurm_job_serves_and_trains_with_real_vllm(cli):
    two_cpus = [o for o in SLURM if not o.startswith("launcher.slurm.cpus_per_task=")]
    two_cpus.append("launcher.slurm.cpus_per_task=2")  # the server and the rank
    result, run_dir = cli(
        *two_cpus,
        "vllm=server",
        "vllm.enforce_eager=true",
        "trainer.max_steps=2",
        timeout=900,
    )
    summary = rundir.read_summary(run_dir)
    assert result.returncode == 0 and summary["status"] == "completed", result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["global_step"] == 2 and summary["memory/vllm/startup/kv_cache_gib"] == 1.0
    log = (run_dir / rundir.LOG).read_text()
    assert "[vllm]" in log and log.count("weight sync: ") >= 2
    records = [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]
    assert all("memory/weight_sync/host_rss_max_gib" in r for r in records)
