"""TensorBoard through transformers' TensorBoardCallback: event files in <run dir>/tensorboard."""

import os
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.trackers.common import summary_metrics

REPORT_TO = "tensorboard"
PACKAGE = "tensorboard"


class Tracker:
    """TensorBoard through transformers' TensorBoardCallback: event files in <run dir>/tensorboard
    (TENSORBOARD_LOGGING_DIR overrides); finish() writes the summary there at the last step."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run_dir / "tensorboard"))

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=os.environ["TENSORBOARD_LOGGING_DIR"])
        step = int(summary.get("global_step") or 0)
        for key, value in summary_metrics(summary).items():
            writer.add_scalar(f"summary/{key}", value, step)
        writer.close()
