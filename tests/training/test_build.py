"""What the worker builds from the frozen config."""

import pytest

from tests.helpers import REPO, compose_cfg


@pytest.mark.slow  # a subprocess importing trl: ~6 s of make test-fast's budget
def test_workers_never_import_the_libraries_their_run_does_not_use():
    """bitsandbytes' import loads torch._inductor (~1.2 s of each worker's start), trl imports every installed
    tracker and peft, transformers deepspeed; a quantized model or an 8-bit optimizer keeps bitsandbytes
    (test_quantized_vision_eval trains QLoRA for real), adapters keep peft, a ZeRO stage deepspeed, the run's
    trackers and DeepSpeed's enabled monitors stay."""
    import subprocess
    import sys

    from grpo_exp.training import build

    code = (
        "import sys; from tests.helpers import compose_cfg; from grpo_exp.training import build; "
        "hidden = build.hide_unused_libraries(compose_cfg('logger=mlflow')); from trl import GRPOTrainer; "
        "from transformers.utils import is_bitsandbytes_available; "
        "print(sorted(hidden), sys.modules['bitsandbytes'] is None, is_bitsandbytes_available(), "
        "'mlflow' in sys.modules and sys.modules['mlflow'] is not None, sys.modules.get('wandb'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    expected = f"{sorted(['bitsandbytes', 'peft', 'deepspeed', 'wandb', 'trackio', 'swanlab'])} True False True None"
    assert out.stdout.strip().splitlines()[-1:] == [expected], out.stdout[-2000:] + out.stderr[-2000:]
    assert not {"bitsandbytes", "peft"} & set(build.unused_libraries(compose_cfg("peft=qlora")))
    assert "bitsandbytes" not in build.unused_libraries(compose_cfg("trainer.optim=paged_adamw_8bit"))
    monitored = compose_cfg("logger=none", "deepspeed=zero1", "+deepspeed.wandb.enabled=true")
    assert not {"wandb", "deepspeed"} & set(build.unused_libraries(monitored))
    every_one = compose_cfg("logger=wandb", "logger.also=[trackio,mlflow,swanlab]", "peft=lora", "deepspeed=zero2")
    assert build.unused_libraries(every_one) == ["bitsandbytes"]
    before = dict(sys.modules)
    assert build.hide_unused_libraries(compose_cfg("logger=none")) == [
        name for name in build.unused_libraries(compose_cfg("logger=none")) if name not in before
    ]
    for name in set(sys.modules) - set(before):
        del sys.modules[name]  # the test process imports them later as it likes


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
