"""One training rank, read top-down: prepare (the model files, the memory cap, where a resumed run continues, the
tracker, the watchdog and the probes), train (join the process group, check the nodes agree, build, train), record
(ranks/rank<N>.json, rank 0's measurements and tracker). worker.py, the process's entry point, imports this module
once its stop handler is installed: torch, transformers and trl load here.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from grpo_exp import trackers, visible_devices
from grpo_exp.core import metrics, outcome, rundir
from grpo_exp.core.records import RankRecord, Status, Summary
from grpo_exp.planning import plan_file
from grpo_exp.training import build, callbacks, guards, heartbeat, phases, probes
from grpo_exp.training.preemption import Preemption

log = logging.getLogger("grpo_exp")


@dataclass
class Rank:
    """What one training process holds from start to end: where it writes, what it measures."""

    cfg: DictConfig
    run_dir: Path
    rank: int
    world_size: int
    started: float
    checkpoint: tuple[Path, int] | None  # (its directory, its step) when the run resumes
    tracker: trackers.Trackers  # rank 0's trackers (the others' is empty)
    watchdog: guards.StallWatchdog
    callback: callbacks.RunDirCallback
    phases: phases.PhaseMemory | None  # None with memory.telemetry=false
    heartbeat: heartbeat.Heartbeat | None = None  # multi-node runs: the other nodes are heard from (heartbeat.py)
    hosts: list[str] = field(default_factory=lambda: [socket.gethostname()])  # each rank's machine, by rank
    meter: probes.ModelStateMeter | None = None  # once the model is built, with memory.telemetry
    peaks: dict[str, float] = field(default_factory=dict)  # the run's memory peaks, filled at every logging step
    # The rank's end is recorded once, by the first of the main thread and the heartbeat's watcher to reach it
    recording: threading.Lock = field(default_factory=threading.Lock)
    recorded: bool = False


def prepare(cfg: DictConfig, run_dir: Path, rank: int, world_size: int) -> Rank:
    """Everything before the process group: the model files, the memory cap, where a resumed run
    continues, the tracker, the stall watchdog and the probes."""
    started = time.time()
    # Before any process group exists: transformers saves only from rank 0 once one does, and the
    # rank that wins the build lock may be another.
    build.model_path(cfg)
    probes.apply_memory_limit(cfg.memory.limit_gib)
    # A run dir with a checkpoint continues from it; the steps after it are logged again, so rank 0
    # drops their lines first (before the metrics writer opens the file).
    checkpoint = rundir.latest_checkpoint(run_dir)
    dropped = rundir.truncate_metrics(run_dir, checkpoint[1] if checkpoint else 0) if rank == 0 else 0
    if checkpoint is not None or dropped:
        log.info(
            "resuming from %s; %d metrics line(s) after it dropped", checkpoint[0] if checkpoint else "step 0", dropped
        )
    tracker = trackers.start(cfg, run_dir) if rank == 0 else trackers.Trackers([])
    watchdog = guards.StallWatchdog(run_dir, rank, cfg.watchdog.stall_s)
    vllm_probe = probes.VllmServerProbe.from_env() if rank == 0 and cfg.vllm.mode == "server" else None
    phase_memory = None
    if cfg.memory.telemetry:
        phase_file = rundir.phase_path(run_dir, rank)
        phase_file.parent.mkdir(parents=True, exist_ok=True)
        phase_memory = phases.PhaseMemory(probes.MemoryProbe(), vllm_probe, phase_file=phase_file)
    return Rank(
        cfg,
        run_dir,
        rank,
        world_size,
        started,
        checkpoint,
        tracker,
        watchdog,
        callbacks.RunDirCallback(run_dir, rank, watchdog, tracker),
        phase_memory,
    )


def train(state: Rank, preemption: Preemption) -> RankRecord:
    """Join the process group, check the nodes agree, build, train: this rank's record of the end."""
    cfg = state.cfg
    try:
        _join(state, use_cpu=not torch.cuda.is_available())
        trainer = build.trainer(
            cfg,
            state.run_dir,
            not torch.cuda.is_available(),
            callbacks=[state.callback, callbacks.SaveAndStop(preemption, state.world_size)],
            phases=state.phases,
        )
        _check_placement(trainer)
        state.tracker.ready()
        if state.phases is not None:
            state.peaks = trainer.run_peaks  # the measured trainer fills it at every logging step
            state.meter = probes.ModelStateMeter(trainer.model)
            state.meter.install()
        result = trainer.train(resume_from_checkpoint=str(state.checkpoint[0]) if state.checkpoint else None)
        if state.heartbeat is not None:  # every rank is past the last collective: each finishes at its own pace now
            state.heartbeat.close()
        ended: RankRecord = {
            "status": Status.COMPLETED,
            "time": time.time(),
            "error": None,
            "global_step": result.global_step,
            "train_runtime_s": result.metrics.get("train_runtime"),
            "runtime": {**_run_facts(trainer), "hosts": state.hosts},
        }
        if preemption.signal_name is not None:
            saved = rundir.latest_checkpoint(state.run_dir)
            ended["status"] = Status.PREEMPTED
            ended["error"] = (
                f"stopped by {preemption.signal_name} at step {result.global_step}; "
                f"checkpoint {saved[0] if saved else '(none)'} saved: `python -m grpo_exp resume={state.run_dir}` "
                "continues"
            )
        log.info("run facts: %s", ended["runtime"])
        return ended
    except BaseException as exc:  # KeyboardInterrupt included: every end is recorded
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second stop must not cut the record short
        ended = outcome.classify(exc, state.rank, state.phases)
        if ended["status"] == Status.INTERRUPTED and preemption.signal_name is not None:
            ended["status"] = Status.PREEMPTED
            ended["error"] = f"stopped by {preemption.signal_name} before training started; nothing to save"
        if ended["status"] != Status.INTERRUPTED:
            log.exception("training failed (%s)", ended["status"])
        return ended


def record(state: Rank, ended: RankRecord) -> bool:
    """ranks/rank<N>.json (rank 0 always, with the run's measurements; another rank when it did not
    complete), and rank 0's W&B run finished with the status as far as it can tell. The main thread and the
    heartbeat's watcher may both end the rank: the first records, the other waits for it and returns False."""
    with state.recording:
        if state.recorded:
            return False
        state.recorded = True
        _write_record(state, ended)
        return True


def _write_record(state: Rank, ended: RankRecord) -> None:
    if threading.current_thread() is threading.main_thread():  # (the heartbeat's watcher records a lost node)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # torchrun stops the ranks while rank 0 finishes W&B
    if state.heartbeat is not None:
        if ended["status"] not in (Status.COMPLETED, Status.PREEMPTED, Status.INTERRUPTED, Status.NODE_LOST):
            state.heartbeat.post_failure(ended.get("error"))  # the other nodes' ranks stop now, naming this one
        state.heartbeat.close()
    state.watchdog.close()
    measurements: dict[str, float] = {}  # rank 0's, by metric name: memory/peak*, measured/*, plan/*
    previous = rundir.read_summary(state.run_dir) if state.rank == 0 else Summary()  # a resumed run's so far
    if state.rank == 0:  # rank 0's record carries the run's measurements, however training ended
        measured = state.meter.metrics() if state.meter is not None else {}
        if state.phases is not None:
            measured.update(phases.throughput(state.phases, state.callback.last_logs))
        if ended["status"] != Status.COMPLETED and state.phases is not None:
            # the steps since the last logging step were never gathered: the phases that finished and what the
            # dying phase reached (its segment closed as the exception left it) are this rank's own figures
            phases.run_peaks(phases.aggregate([state.phases.take_window()], [phases.this_node()]), state.peaks)
        so_far: Mapping[str, Any] = previous  # by metric name
        peaks = {k: max(v, so_far.get(k, v)) for k, v in state.peaks.items()}  # over every segment of the run
        measurements = {**peaks, **measured, **_planned(state.run_dir, measured)}
        ended["final_metrics"] = state.callback.last_logs
        # a run that ended early: the last step it finished (a resumed one's checkpoint before its first)
        ended["global_step"] = ended.get("global_step") or state.callback.step or (state.checkpoint or (None, 0))[1]
        ended["first_metrics"] = previous.get("first_metrics") or state.callback.first_logs
        ended["worker_wall_s"] = round(time.time() - state.started, 3)
    if state.rank == 0 or ended["status"] != Status.COMPLETED:
        where: RankRecord = {"node": int(os.environ.get("GROUP_RANK", "0")), "host": socket.gethostname()}
        rundir.write_rank_record(state.run_dir, state.rank, {**where, **ended}, measurements)
    # the W&B run ends with the run's status as far as rank 0 can tell it (the driver has the last word)
    if state.rank == 0:
        explained = outcome.explain(outcome.read_records(state.run_dir))
        state.tracker.finish({**previous, **explained}, outcome.EXIT_CODES[explained["status"]])


def _join(state: Rank, use_cpu: bool) -> None:
    """Join the process group, check every rank runs the same thing (before the model loads: fail fast, not hang),
    and on several nodes start hearing from the others."""
    _init_distributed(state.cfg, state.world_size, use_cpu)
    if state.world_size > 1:
        state.hosts = guards.check_across_ranks(state.cfg)
    beat_s = state.cfg.watchdog.heartbeat_s
    if int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1 and beat_s:  # torchrun's node count
        state.heartbeat = heartbeat.Heartbeat(
            state.run_dir, state.rank, state.world_size, beat_s, lambda end: _lost(state, end)
        )


def _lost(state: Rank, ended: RankRecord) -> None:
    """The heartbeat's end of a rank (another node lost, or failed): recorded as any end is, then the process ends
    from the heartbeat's thread: the main thread may be blocked in a collective that will never return."""
    try:
        if not record(state, ended):
            return  # the main thread recorded the rank's end first, and ends the process
    except Exception:  # the process ends all the same: the main thread may never come back
        log.exception("recording this rank's end failed")
    logging.shutdown()
    os._exit(outcome.EXIT_CODES[ended["status"]])


# What the steps use.


def _init_distributed(cfg, world_size: int, use_cpu: bool) -> None:
    """Join the process group before anything else: the fingerprint check runs on it, and ZeRO-3
    partitions weights while they load. Accelerate and DeepSpeed reuse this group."""
    if world_size == 1:
        return
    backend = "gloo" if use_cpu else "nccl"
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.topology.collective_timeout_s))
    if cfg.deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend)


def _check_placement(trainer) -> None:
    if torch.cuda.is_available():
        problems = guards.placement_problems(
            visible_devices(), os.environ.get("GRPO_EXP_VLLM_GPUS"), trainer.args.n_gpu
        )
        if problems:
            raise RuntimeError("startup guard: " + "; ".join(problems))


def _run_facts(trainer) -> dict:
    """What the run really was, read from torch.distributed and the wrapped model (tests assert on it)."""
    distributed = dist.is_available() and dist.is_initialized()
    engine = trainer.model_wrapped
    params = list(trainer.model.parameters())
    return {
        "world_size": dist.get_world_size() if distributed else 1,
        "backend": str(dist.get_backend()) if distributed else None,
        "wrapper": type(engine).__name__,  # DistributedDataParallel, DeepSpeedEngine, or the model itself
        "zero_stage": engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None,
        "trainable_parameters": sum(_numel(p) for p in params if p.requires_grad),
        # 4 / 8 when the base weights were loaded quantized (bitsandbytes), else None
        "weight_bits": 4
        if getattr(trainer.model, "is_loaded_in_4bit", False)
        else 8
        if getattr(trainer.model, "is_loaded_in_8bit", False)
        else None,
        "parameters": sum(_numel(p) for p in params),
        "fsdp": any(hasattr(p, "to_local") for p in params),  # FSDP2 holds DTensor parameters
    }


def _numel(param) -> int:
    return getattr(param, "ds_numel", None) or param.numel()  # ZeRO-3 shards hold ds_numel


def _planned(run_dir: Path, measured: dict) -> dict:
    """The planner's prediction (plan.json) as plan/<role>/* beside the measured memory, and its
    error on the model states where both exist."""
    out = plan_file.summary_keys(plan_file.read(run_dir))
    states = measured.get(metrics.measured("model_states"))
    if states and metrics.plan_component("train", "weights") in out:
        predicted = sum(
            out.get(metrics.plan_component("train", k), 0.0)
            for k in ("weights", "gradients", "fp32_gradients", "optimizer")
        )
        out[metrics.MODEL_STATES_ERROR] = 100 * (predicted - states) / states
    return out
