"""One training process: `python -m grpo_exp.worker <run dir>/config.yaml` (torchrun runs one per rank).

Reads the frozen config (never Hydra), builds the trainer, trains, and on rank 0 writes
metrics.jsonl as steps are logged and summary.json at the end, whatever the end is.
"""

import logging
import os
import sys
import time
from pathlib import Path

from grpo_exp import rundir

log = logging.getLogger("grpo_exp")


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stdout,
        force=True,
    )


def _init_distributed_early(cfg, world_size: int, use_cpu: bool) -> None:
    """ZeRO-3 partitions weights while they load, so the process group must exist before the model."""
    if world_size > 1 and cfg.deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo" if use_cpu else "nccl")


def _run_facts(trainer) -> dict:
    """What the run really was, read from torch.distributed and the wrapped model (tests assert on it)."""
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    engine = trainer.model_wrapped
    params = list(trainer.model.parameters())
    return {
        "world_size": dist.get_world_size() if distributed else 1,
        "backend": str(dist.get_backend()) if distributed else None,
        "wrapper": type(engine).__name__,  # DistributedDataParallel, DeepSpeedEngine, or the model itself
        "zero_stage": engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None,
        "trainable_parameters": sum(_numel(p) for p in params if p.requires_grad),
        "parameters": sum(_numel(p) for p in params),
    }


def _numel(param) -> int:
    return getattr(param, "ds_numel", None) or param.numel()  # ZeRO-3 shards hold ds_numel


def make_callback(run_dir: Path):
    """A TrainerCallback that mirrors every log() of rank 0 into metrics.jsonl. GRPOTrainer.log()
    has already merged its reward/completion metrics into `logs` when callbacks see them."""
    from transformers import TrainerCallback

    class _RunDirCallback(TrainerCallback):
        def __init__(self):
            self.writer = rundir.MetricsWriter(run_dir) if _rank() == 0 else None
            self.last_logs: dict = {}

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.writer is None or not logs:
                return
            if "train_runtime" not in logs:  # that one is Trainer's end-of-run summary, not a step
                self.writer.write(state.global_step, logs)
            self.last_logs.update(logs)

    return _RunDirCallback()


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def main(config_path: str) -> int:
    started = time.time()
    rank, world_size = _rank(), int(os.environ.get("WORLD_SIZE", "1"))
    _setup_logging(rank)
    cfg = rundir.load_config(config_path)
    run_dir = Path(config_path).parent

    import torch

    from grpo_exp import build, tracking

    use_cpu = not torch.cuda.is_available()
    # Before any process group exists: transformers saves only from rank 0 once one does, and the
    # rank that wins the build lock may be another.
    build.model_path(cfg)
    _init_distributed_early(cfg, world_size, use_cpu)

    tracker = tracking.start(cfg, run_dir) if rank == 0 else tracking.NullTracker()
    callback = make_callback(run_dir)
    outcome: dict = {"status": "failed", "error": None}
    try:
        trainer = build.trainer(cfg, run_dir, use_cpu, callbacks=[callback])
        result = trainer.train()
        outcome = {
            "status": "completed",
            "error": None,
            "global_step": result.global_step,
            "train_runtime_s": result.metrics.get("train_runtime"),
            "runtime": _run_facts(trainer),
        }
        log.info("run facts: %s", outcome["runtime"])
    except KeyboardInterrupt:
        outcome = {"status": "interrupted", "error": None}
        raise
    except Exception as exc:
        log.exception("training failed")
        outcome = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if rank == 0:  # the W&B run is finished with its summary however training ended
            summary = rundir.write_summary(
                run_dir, **outcome, final_metrics=callback.last_logs, worker_wall_s=round(time.time() - started, 3)
            )
            tracker.finish(summary, summary["exit_code"])
    return rundir.STATUS_EXIT_CODES[outcome["status"]]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
