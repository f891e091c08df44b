"""What the worker builds from the frozen config."""

import pytest

from tests.helpers import compose_cfg


def test_transformers_before_5_18_get_activation_checkpointing_by_its_old_name():
    """vLLM's CPU build pins transformers < 5.18, whose TrainingArguments call it gradient_checkpointing."""
    import dataclasses

    from grpo_exp.training import build

    @dataclasses.dataclass
    class Before518:
        gradient_checkpointing: bool = True
        gradient_checkpointing_kwargs: dict | None = None

    @dataclasses.dataclass
    class Since518(Before518):
        activation_checkpointing: bool | None = None
        activation_checkpointing_kwargs: dict | None = None

    old = build.for_installed_transformers(
        {"activation_checkpointing": False, "activation_checkpointing_kwargs": None}, Before518
    )
    assert old == {"gradient_checkpointing": False}  # false stays false: TRL's default (true) would turn it on
    new = {"activation_checkpointing": False, "activation_checkpointing_kwargs": None}
    assert build.for_installed_transformers(dict(new), Since518) == new


@pytest.mark.slow  # imports trl (training/weight_sync.py)
def test_trls_weight_push_is_replaced_only_where_it_cannot_run(tmp_path):
    from grpo_exp.training import build

    assert build.generation_class(compose_cfg("vllm=colocate"), tmp_path, use_cpu=False) is None  # TRL's on GPUs
    assert build.generation_class(compose_cfg("vllm=server"), tmp_path, use_cpu=False) is None  # NCCL
    colocated = build.generation_class(compose_cfg("vllm=colocate"), tmp_path, use_cpu=True)
    assert colocated.sync_dir is None
    served = build.generation_class(
        compose_cfg("vllm=server", "vllm.weight_sync_dir=/shared/sync"), tmp_path, use_cpu=True
    )
    assert str(served.sync_dir) == "/shared/sync"
    assert (
        build.generation_class(compose_cfg("vllm=server"), tmp_path, use_cpu=True).sync_dir == tmp_path / "weight_sync"
    )
