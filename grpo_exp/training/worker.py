"""One training process: `python -m grpo_exp.training.worker <run dir>/config.yaml` (torchrun runs one per rank).

Reads the frozen config (never Hydra), builds the trainer (measured_trainer.py measures every phase of a
step), trains. Rank 0 writes metrics.jsonl as steps are logged; rank 0 always, and any rank that does not
complete, records how it ended in ranks/rank<N>.json, which the driver turns into summary.json.

A run dir is the unit of resumption: when <run dir>/checkpoints holds a checkpoint, training
continues from the latest one (rank 0 first drops metrics.jsonl lines after its step, which the run
logs again). SIGTERM, SIGUSR1 or SIGUSR2 (SLURM preemption, `--signal` before a time limit) asks
for a checkpoint at the next step boundary, agreed across ranks, then the run ends as `preempted`.

Read top-down: main, then a rank's steps in the order they happen (prepare, train, record), then what they use.
The module imports nothing heavy at its top: the stop handler is installed before torch, transformers and trl
load (about 5 s on 2 cores), so a stop in those seconds is still recorded.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from grpo_exp import visible_devices
from grpo_exp.core import metrics, outcome, rundir
from grpo_exp.core.records import Status
from grpo_exp.planning import plan_file
from grpo_exp.training.preemption import Preemption

if TYPE_CHECKING:
    from grpo_exp.trackers import Trackers
    from grpo_exp.training.callbacks import RunDirCallback
    from grpo_exp.training.guards import StallWatchdog
    from grpo_exp.training.heartbeat import Heartbeat
    from grpo_exp.training.phases import PhaseMemory
    from grpo_exp.training.probes import ModelStateMeter

log = logging.getLogger("grpo_exp")


def main(config_path: str) -> int:
    """Read the frozen config, prepare this rank, train, record how it ended; the exit code of that end."""
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    _setup_logging(rank)
    preemption = Preemption()
    preemption.install()  # before torch loads (_prepare): a stop while it loads is still recorded
    cfg = rundir.load_config(config_path)
    if cfg.vllm.mode == "colocate":  # importing trl (in _prepare) lowers vLLM's logging to ERROR unless it is set;
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")  # the engine's start-up lines carry its figures (vllm_log)
    run_dir = Path(config_path).resolve().parent
    if cfg.env.working_dir is not None:  # where the user's tools, environments and rewards open relative paths
        os.chdir(Path(cfg.env.working_dir).expanduser())
    state = _prepare(cfg, run_dir, rank, world_size)
    ended = _train(state, preemption)
    _record(state, ended)
    return outcome.EXIT_CODES[ended["status"]]


@dataclass
class _Rank:
    """What one training process holds from start to end: where it writes, what it measures."""

    cfg: DictConfig
    run_dir: Path
    rank: int
    world_size: int
    started: float
    checkpoint: tuple[Path, int] | None = None  # (its directory, its step) when the run resumes
    tracker: Trackers | None = None
    watchdog: StallWatchdog | None = None
    heartbeat: Heartbeat | None = None  # multi-node runs: the other nodes are heard from (training/heartbeat.py)
    hosts: list[str] = field(default_factory=lambda: [socket.gethostname()])  # each rank's machine, by rank
    callback: RunDirCallback | None = None
    phases: PhaseMemory | None = None  # None with memory.telemetry=false
    meter: ModelStateMeter | None = None
    peaks: dict[str, float] = field(default_factory=dict)  # the run's memory peaks, filled at every logging step
    # The rank's end is recorded once, by the first of the main thread and the heartbeat's watcher to reach it
    recording: threading.Lock = field(default_factory=threading.Lock)
    recorded: bool = False


def _prepare(cfg: DictConfig, run_dir: Path, rank: int, world_size: int) -> _Rank:
    """Everything before the process group: the model files, the memory cap, where a resumed run
    continues, the tracker, the stall watchdog and the probes."""
    # torch, transformers and trl load here, after main installed the stop handler
    from grpo_exp import trackers  # (the stop handler first: see the module's docstring)
    from grpo_exp.training import build, callbacks, guards, phases, probes

    state = _Rank(cfg, run_dir, rank, world_size, started=time.time())
    # Before any process group exists: transformers saves only from rank 0 once one does, and the
    # rank that wins the build lock may be another.
    build.model_path(cfg)
    probes.apply_memory_limit(cfg.memory.limit_gib)
    # A run dir with a checkpoint continues from it; the steps after it are logged again, so rank 0
    # drops their lines first (before the metrics writer opens the file).
    state.checkpoint = rundir.latest_checkpoint(run_dir)
    dropped = rundir.truncate_metrics(run_dir, state.checkpoint[1] if state.checkpoint else 0) if rank == 0 else 0
    if state.checkpoint is not None or dropped:
        log.info(
            "resuming from %s; %d metrics line(s) after it dropped",
            state.checkpoint[0] if state.checkpoint else "step 0",
            dropped,
        )
    state.tracker = trackers.start(cfg, run_dir) if rank == 0 else trackers.Trackers([])
    state.watchdog = guards.StallWatchdog(run_dir, rank, cfg.watchdog.stall_s)
    state.callback = callbacks.RunDirCallback(run_dir, rank, state.watchdog, state.tracker)
    vllm_probe = probes.VllmServerProbe.from_env() if rank == 0 and cfg.vllm.mode == "server" else None
    if cfg.memory.telemetry:
        phase_file = rundir.phase_path(run_dir, rank)
        phase_file.parent.mkdir(parents=True, exist_ok=True)
        state.phases = phases.PhaseMemory(probes.MemoryProbe(), vllm_probe, phase_file=phase_file)
    else:
        state.phases = None
    return state


def _train(state: _Rank, preemption: Preemption) -> dict:
    """Join the process group, check the nodes agree, build, train: this rank's record of the end."""
    import torch

    from grpo_exp.training import build, callbacks, probes  # loaded by _prepare already

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
        ended = {
            "status": Status.COMPLETED,
            "time": time.time(),
            "error": None,
            "global_step": result.global_step,
            "train_runtime_s": result.metrics.get("train_runtime"),
            "runtime": {**_run_facts(trainer), "hosts": state.hosts},
        }
        if preemption.signal_name is not None:
            saved = rundir.latest_checkpoint(state.run_dir)
            ended.update(
                status=Status.PREEMPTED,
                error=f"stopped by {preemption.signal_name} at step {result.global_step}; "
                f"checkpoint {saved[0] if saved else '(none)'} saved: `python -m grpo_exp resume={state.run_dir}` "
                "continues",
            )
        log.info("run facts: %s", ended["runtime"])
        return ended
    except BaseException as exc:  # KeyboardInterrupt included: every end is recorded
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second stop must not cut the record short
        ended = outcome.classify(exc, state.rank, state.phases)
        if ended["status"] == Status.INTERRUPTED and preemption.signal_name is not None:
            ended.update(
                status=Status.PREEMPTED,
                error=f"stopped by {preemption.signal_name} before training started; nothing to save",
            )
        if ended["status"] != Status.INTERRUPTED:
            log.exception("training failed (%s)", ended["status"])
        return ended


def _record(state: _Rank, ended: dict) -> bool:
    """ranks/rank<N>.json (rank 0 always, with the run's measurements; another rank when it did not
    complete), and rank 0's W&B run finished with the status as far as it can tell. The main thread and the
    heartbeat's watcher may both end the rank: the first records, the other waits for it and returns False."""
    with state.recording:
        if state.recorded:
            return False
        state.recorded = True
        _write_record(state, ended)
        return True


def _write_record(state: _Rank, ended: dict) -> None:
    from grpo_exp.training import phases  # loaded by _prepare already

    if threading.current_thread() is threading.main_thread():  # (the heartbeat's watcher records a lost node)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # torchrun stops the ranks while rank 0 finishes W&B
    if state.heartbeat is not None:
        if ended["status"] not in (Status.COMPLETED, Status.PREEMPTED, Status.INTERRUPTED, Status.NODE_LOST):
            state.heartbeat.post_failure(ended.get("error"))  # the other nodes' ranks stop now, naming this one
        state.heartbeat.close()
    state.watchdog.close()
    if state.rank == 0:  # rank 0's record carries the run's measurements, however training ended
        measured = state.meter.metrics() if state.meter is not None else {}
        if state.phases is not None:
            measured.update(phases.throughput(state.phases, state.callback.last_logs))
        if ended["status"] != Status.COMPLETED and state.phases is not None:
            # the steps since the last logging step were never gathered: the phases that finished and what the
            # dying phase reached (its segment closed as the exception left it) are this rank's own figures
            phases.run_peaks(phases.aggregate([state.phases.take_window()], [phases.this_node()]), state.peaks)
        previous = rundir.read_summary(state.run_dir)  # a resumed run's peaks cover every segment
        peaks = {k: max(v, previous.get(k, v)) for k, v in state.peaks.items()}
        ended.update(
            **peaks,
            **measured,
            **_planned(state.run_dir, measured),
            final_metrics=state.callback.last_logs,
            # a run that ended early: the last step it finished (a resumed one's checkpoint before its first)
            global_step=ended.get("global_step") or state.callback.step or (state.checkpoint or (None, 0))[1],
            first_metrics=previous.get("first_metrics") or state.callback.first_logs,
            worker_wall_s=round(time.time() - state.started, 3),
        )
    if state.rank == 0 or ended["status"] != Status.COMPLETED:
        node = {"node": int(os.environ.get("GROUP_RANK", "0")), "host": socket.gethostname()}
        rundir.write_rank_record(state.run_dir, state.rank, {**node, **ended})
    # the W&B run ends with the run's status as far as rank 0 can tell it (the driver has the last word)
    if state.rank == 0:
        explained = outcome.explain(outcome.read_records(state.run_dir))
        state.tracker.finish({**previous, **explained}, outcome.EXIT_CODES[explained["status"]])


def _join(state: _Rank, use_cpu: bool) -> None:
    """Join the process group, check every rank runs the same thing (before the model loads: fail fast, not hang),
    and on several nodes start hearing from the others."""
    from grpo_exp.training import guards, heartbeat  # guards loaded by _prepare already; heartbeat is light

    _init_distributed(state.cfg, state.world_size, use_cpu)
    if state.world_size > 1:
        state.hosts = guards.check_across_ranks(state.cfg)
    beat_s = state.cfg.watchdog.heartbeat_s
    if int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1 and beat_s:  # torchrun's node count
        state.heartbeat = heartbeat.Heartbeat(
            state.run_dir, state.rank, state.world_size, beat_s, lambda end: _lost(state, end)
        )


def _lost(state: _Rank, ended: dict) -> None:
    """The heartbeat's end of a rank (another node lost, or failed): recorded as any end is, then the process ends
    from the heartbeat's thread: the main thread may be blocked in a collective that will never return."""
    try:
        if not _record(state, ended):
            return  # the main thread recorded the rank's end first, and ends the process
    except Exception:  # the process ends all the same: the main thread may never come back
        log.exception("recording this rank's end failed")
    logging.shutdown()
    os._exit(outcome.EXIT_CODES[ended["status"]])


# What the steps use.


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stdout,
        force=True,
    )


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


def _check_placement(trainer) -> None:
    import torch

    from grpo_exp.training.guards import placement_problems  # loaded by _prepare already

    if torch.cuda.is_available():
        problems = placement_problems(visible_devices(), os.environ.get("GRPO_EXP_VLLM_GPUS"), trainer.args.n_gpu)
        if problems:
            raise RuntimeError("startup guard: " + "; ".join(problems))


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


def _exit_now(code: int) -> None:
    """End the process without Python's teardown. Everything the run leaves is written by now (rank
    records, metrics, checkpoints, the W&B run, which finish() flushed), and freeing the objects of
    torch, transformers and datasets one by one takes ~2 s on 2 cores: every short run, every test
    and every sweep trial paid it, for memory the OS takes back at once. atexit handlers do not run here
    (a reward function that registers one must flush its own files)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    coverage = sys.modules.get("coverage")  # measured (make coverage): its data is saved at exit by an atexit
    measuring = coverage.Coverage.current() if coverage is not None else None  # hook, which os._exit skips
    if measuring is not None:
        measuring.stop()
        measuring.save()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main(sys.argv[1]))
