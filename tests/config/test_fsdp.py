"""The fsdp group: what is refused beside it (by key, with the fix), and what reaches transformers: its keys are
GRPOConfig.fsdp_config's verbatim, read back from the installed transformers."""

import dataclasses

import pytest

from grpo_exp.config.schema import FsdpConfig
from grpo_exp.training import fsdp
from tests.helpers import compose_cfg, problem_keys, problems


def test_one_sharding_per_run():
    found = problems("fsdp=full_shard", "deepspeed=zero3")
    assert problem_keys(found) == ["fsdp"]
    assert "ZeRO stage 3" in found[0].why and "deepspeed=none" in found[0].fix and "fsdp=none" in found[0].fix


def test_two_activation_checkpointings_are_refused_as_transformers_refuses_them():
    both = ("fsdp=full_shard", "fsdp.activation_checkpointing=true", "trainer.activation_checkpointing=true")
    assert problem_keys(problems(*both)) == ["fsdp.activation_checkpointing"]
    # transformers 5 reads the deprecated gradient_checkpointing where activation_checkpointing is unset
    alias = ("fsdp=full_shard", "fsdp.activation_checkpointing=true", "trainer.activation_checkpointing=null")
    assert problem_keys(problems(*alias, "trainer.gradient_checkpointing=true")) == ["fsdp.activation_checkpointing"]
    assert problems("fsdp=full_shard", "fsdp.activation_checkpointing=true") == []  # grpo_exp's default: off


def test_qlora_and_fsdp1_are_refused_by_key():
    assert problem_keys(problems("fsdp=full_shard", "peft=qlora")) == ["fsdp"]
    assert problem_keys(problems("fsdp=full_shard", "fsdp.version=1")) == ["fsdp.version"]
    assert problem_keys(problems("fsdp=full_shard", "fsdp.shard_group=rack")) == ["fsdp.shard_group"]


def test_cpu_offload_is_refused_on_cpu_ranks_and_planned_for_gpus():
    found = problems("fsdp=full_shard_offload")  # topology=local without a GPU: CPU ranks
    assert problem_keys(found) == ["fsdp.cpu_offload"] and "Cannot access accelerator device" in found[0].why
    assert problems("fsdp=full_shard_offload", "topology=1x8", "model=qwen0.5b", gpus=8) == []


@pytest.mark.slow  # imports transformers' TrainingArguments: ~4 s of make test-fast's budget
def test_every_fsdp_key_is_one_transformers_reads(monkeypatch):
    """The group's keys but grpo_exp's own are fsdp_config keys: transformers' TrainingArguments (GRPOConfig's base,
    which owns fsdp / fsdp_config) turns them into accelerate's plugin arguments, and nothing is left unread."""
    from transformers import TrainingArguments

    cfg = compose_cfg(
        "fsdp=full_shard",
        "fsdp.reshard_after_forward=false",
        "fsdp.cpu_ram_efficient_loading=true",
        "fsdp.transformer_layer_cls_to_wrap=[Qwen2DecoderLayer]",
        "fsdp.state_dict_type=SHARDED_STATE_DICT",
    )
    fields = fsdp.fsdp_fields(cfg)
    own = set(fsdp.FSDP_OWN_KEYS)
    assert set(fields["fsdp_config"]) == {f.name for f in dataclasses.fields(FsdpConfig)} - own
    args = TrainingArguments(output_dir="/tmp/unused", use_cpu=True, report_to="none", **fields).fsdp_plugin_args
    assert args["fsdp_version"] == 2 and args["reshard_after_forward"] is False
    assert args["cpu_ram_efficient_loading"] is True and args["state_dict_type"] == "SHARDED_STATE_DICT"
    assert args["transformer_cls_names_to_wrap"] == "Qwen2DecoderLayer"
    assert fsdp.fsdp_fields(compose_cfg()) == {}


@pytest.mark.parametrize(
    ("world", "local", "replicas"),
    [
        pytest.param(16, 8, 2, marks=pytest.mark.slow),  # imports accelerate (and torch): ~5 s of make test-fast's
        (8, 8, None),
    ],
)
def test_hybrid_shard_is_accelerates_parallelism_config_over_nodes(monkeypatch, world, local, replicas):
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))
    fields = fsdp.fsdp_fields(compose_cfg("fsdp=hybrid_shard"))
    found = fields.get("parallelism_config")
    assert (found.dp_replicate_size, found.dp_shard_size) == (replicas, local) if replicas else found is None


def test_an_fsdp_run_is_tagged_with_its_sharding():
    from grpo_exp.trackers.common import run_tags

    assert "fsdp:hybrid_shard" in run_tags(compose_cfg("fsdp=hybrid_shard"))
    assert not any(t.startswith("fsdp:") for t in run_tags(compose_cfg()))
