"""The run dir's files: written as they are read, nothing half written."""

import math

import pytest
from omegaconf import open_dict

from grpo_exp.core import outcome, rundir


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


@pytest.mark.parametrize(
    "overrides",
    [
        ("model=qwen7b", "topology=2x8", "vllm=server", "deepspeed=zero3", "logger=tensorboard"),
        ("model=tiny-hybrid", "fsdp=full_shard", "peft=lora", "env=calculator", "launcher=slurm"),
        ("experiment=open_r1_demo", "launcher=kubernetes", "logger=none"),
    ],
)
def test_config_yaml_is_omegaconfs_own_text(overrides):
    """config.yaml comes from libyaml's emitter, not OmegaConf.to_yaml's: the text must be the same, for composed
    configs and for strings that read back as other types unless quoted, long and multi-line strings, unicode."""
    from omegaconf import OmegaConf

    from tests.helpers import compose_cfg

    cfg = compose_cfg(*overrides)
    OmegaConf.resolve(cfg)  # finalize's own step; ${now:} and ${oc.env:} then read the same in both texts
    with open_dict(cfg):
        cfg.run_name = "1e-05"
        cfg.data.system_prompt = "true"
        cfg.logger.tags = ["null", "~", "0x1f", "1_000", ".inf", "", "yes", "a: b", "- x", "#c", "'q'", '"d"']
        cfg.logger.entity = "line one\nline two: üñí 数学 " + "long words " * 12
    assert rundir.config_text(cfg) == OmegaConf.to_yaml(cfg, resolve=True)
    assert OmegaConf.create(rundir.config_text(cfg)) == cfg  # and it reads back as the config
