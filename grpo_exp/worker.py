"""One training process: `python -m grpo_exp.worker <run dir>/config.yaml` (torchrun runs one per rank).

Reads the frozen config (never Hydra), builds the trainer, instruments its phases, trains. Rank 0
writes metrics.jsonl as steps are logged and summary.json at the end, whatever the end is; any
rank that does not complete first records why in ranks/rank<N>.json.
"""

import json
import logging
import os
import signal
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


def _raise_interrupt(*_):
    # torchrun (after a peer failed) and the driver (Ctrl-C) stop ranks with SIGTERM: turn it into
    # an exception so the summary and the W&B run are still finished.
    raise KeyboardInterrupt


def _init_distributed(cfg, world_size: int, use_cpu: bool) -> None:
    """Join the process group before anything else: the fingerprint check runs on it, and ZeRO-3
    partitions weights while they load. Accelerate and DeepSpeed reuse this group."""
    if world_size == 1:
        return
    from datetime import timedelta

    import torch.distributed as dist

    backend = "gloo" if use_cpu else "nccl"
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.topology.collective_timeout_s))
    if cfg.deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend)


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


def make_callback(run_dir: Path, rank: int, watchdog):
    """A TrainerCallback that mirrors every log() of rank 0 into metrics.jsonl (GRPOTrainer.log()
    has merged its reward/completion and our memory metrics into `logs` by then) and re-arms the
    stall watchdog at every finished step."""
    from transformers import TrainerCallback

    class RunDirCallback(TrainerCallback):
        def __init__(self):
            self.writer = rundir.MetricsWriter(run_dir) if rank == 0 else None
            self.last_logs: dict = {}

        def on_train_begin(self, args, state, control, **kwargs):
            watchdog.arm()

        def on_step_end(self, args, state, control, **kwargs):
            watchdog.arm()

        def on_train_end(self, args, state, control, **kwargs):
            watchdog.disarm()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.writer is None or not logs:
                return
            if "train_runtime" not in logs:  # that one is Trainer's end-of-run summary, not a step
                self.writer.write(state.global_step, logs)
            self.last_logs.update(logs)

    return RunDirCallback()


def _check_placement(trainer) -> None:
    import torch

    from grpo_exp.consistency import placement_problems

    if torch.cuda.is_available():
        problems = placement_problems(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("GRPO_EXP_VLLM_GPUS"), trainer.args.n_gpu)
        if problems:
            raise RuntimeError("startup guard: " + "; ".join(problems))


def _failure(exc: BaseException, rank: int, phases) -> dict:
    """How this rank ended, as summary fields: status oom (with where and how much) or failed."""
    from grpo_exp import telemetry
    from grpo_exp.consistency import Mismatch

    oom = telemetry.oom_details(exc)
    outcome = {"error": f"{type(exc).__name__}: {exc}"[:4000], "time": time.time()}
    if isinstance(exc, KeyboardInterrupt):
        return {**outcome, "status": "interrupted", "error": None}
    if isinstance(exc, Mismatch):
        return {**outcome, "status": "mismatch", "error": str(exc)}
    if oom is None:
        return {**outcome, "status": "failed"}
    snapshot = phases.probe.snapshot() if phases is not None else None
    phase = phases.failed_phase if phases is not None else None
    return {**outcome, "status": "oom", "oom": {"phase": phase, "rank": rank, **oom, "snapshot": snapshot}}


def _planned(run_dir: Path, measured: dict) -> dict:
    """The planner's prediction (plan.json) as plan/<role>/* beside the measured memory, and its
    error on the model states where both exist."""
    path = run_dir / rundir.PLAN
    if not path.exists():
        return {}
    plan = json.loads(path.read_text())
    out = {}
    for role in ("train", "vllm"):
        if (plan.get(role) or {}).get("peak_gib") is not None:
            out[f"plan/{role}/peak_gib"] = plan[role]["peak_gib"]
            out.update({f"plan/{role}/{k}_gib": v for k, v in plan[role]["components_gib"].items()})
    if "measured/train/model_states_gib" in measured and "plan/train/weights_gib" in out:
        predicted = sum(out[f"plan/train/{k}_gib"] for k in ("weights", "gradients", "optimizer"))
        out["plan_error/train/model_states_pct"] = 100 * (predicted - measured["measured/train/model_states_gib"]) / measured["measured/train/model_states_gib"]
    return out


def main(config_path: str) -> int:
    started = time.time()
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    _setup_logging(rank)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    cfg = rundir.load_config(config_path)
    run_dir = Path(config_path).parent

    import torch

    from grpo_exp import build, consistency, telemetry, tracking

    use_cpu = not torch.cuda.is_available()
    # Before any process group exists: transformers saves only from rank 0 once one does, and the
    # rank that wins the build lock may be another.
    build.model_path(cfg)
    telemetry.apply_memory_limit(cfg.memory.limit_gib)

    tracker = tracking.start(cfg, run_dir) if rank == 0 else tracking.NullTracker()
    watchdog = consistency.StallWatchdog(run_dir, rank, cfg.watchdog.stall_s)
    callback = make_callback(run_dir, rank, watchdog)
    vllm_probe = telemetry.VllmServerProbe.from_env() if rank == 0 and cfg.vllm.mode == "server" else None
    phases = telemetry.PhaseMemory(telemetry.MemoryProbe(), vllm_probe) if cfg.memory.telemetry else None
    peaks: dict = {}
    meter = None
    outcome: dict = {"status": "failed", "error": None}
    try:
        _init_distributed(cfg, world_size, use_cpu)
        if world_size > 1:
            consistency.check_across_ranks(cfg)  # before the model loads: fail fast, not hang
        trainer = build.trainer(cfg, run_dir, use_cpu, callbacks=[callback])
        _check_placement(trainer)
        if phases is not None:
            peaks = telemetry.instrument(trainer, phases)
            meter = telemetry.ModelStateMeter(trainer.model)
            meter.install()
        result = trainer.train()
        outcome = {
            "status": "completed",
            "error": None,
            "global_step": result.global_step,
            "train_runtime_s": result.metrics.get("train_runtime"),
            "runtime": _run_facts(trainer),
        }
        log.info("run facts: %s", outcome["runtime"])
    except BaseException as exc:  # KeyboardInterrupt included: every end is recorded
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second stop must not cut the record short
        outcome = _failure(exc, rank, phases)
        if outcome["status"] != "interrupted":
            log.exception("training failed (%s)", outcome["status"])
        rundir.write_rank_outcome(run_dir, rank, outcome)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # torchrun stops the ranks while rank 0 finishes W&B
        watchdog.close()
        if rank == 0:  # the W&B run is finished with its summary however training ended
            if outcome["status"] != "completed":
                outcome = rundir.root_cause(run_dir) or outcome
            measured = meter.metrics() if meter is not None else {}
            if phases is not None:
                measured.update(telemetry.throughput(phases, callback.last_logs))
            summary = rundir.write_summary(
                run_dir, **outcome, **peaks, **measured, **_planned(run_dir, measured),
                final_metrics=callback.last_logs, worker_wall_s=round(time.time() - started, 3),
            )
            tracker.finish(summary, summary["exit_code"])
    return rundir.STATUS_EXIT_CODES[outcome["status"]]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
