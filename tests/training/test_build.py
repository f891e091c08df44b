"""What the worker builds from the frozen config."""

import pytest

from tests.helpers import REPO, compose_cfg


@pytest.mark.slow  # a subprocess importing trl: ~6 s of make test-fast's budget
def test_workers_that_do_not_quantize_never_import_bitsandbytes():
    """Its import loads torch._inductor (~1.2 s of each worker's start); a quantized model or an 8-bit
    optimizer keeps it (test_quantized_vision_eval trains QLoRA for real)."""
    import subprocess
    import sys

    from grpo_exp.training import build

    code = (
        "import sys; from tests.helpers import compose_cfg; from grpo_exp.training import build; "
        "hidden = build.hide_unused_bitsandbytes(compose_cfg()); from trl import GRPOTrainer; "
        "from transformers.utils import is_bitsandbytes_available; "
        "print(hidden, sys.modules['bitsandbytes'] is None, is_bitsandbytes_available())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip().splitlines()[-1:] == ["True True False"], out.stdout[-2000:] + out.stderr[-2000:]
    before = sys.modules.get("bitsandbytes", "absent")
    assert not build.hide_unused_bitsandbytes(compose_cfg("peft=qlora"))
    assert not build.hide_unused_bitsandbytes(compose_cfg("trainer.optim=paged_adamw_8bit"))
    assert sys.modules.get("bitsandbytes", "absent") is before
