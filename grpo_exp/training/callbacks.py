"""The TrainerCallbacks a training rank adds to GRPOTrainer: the run dir's record of every logging step (metrics.jsonl
and the console's one progress line, with the stall watchdog re-armed at every step), and preemption (a stop
request saves a checkpoint at the step boundary the ranks agree on)."""

import logging
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from grpo_exp.core import metrics, rundir
from grpo_exp.trackers import Trackers
from grpo_exp.training.guards import StallWatchdog
from grpo_exp.training.phases import run_peaks
from grpo_exp.training.preemption import Preemption

progress = logging.getLogger("grpo_exp.progress")  # the lines a quiet console shows (launching/launch.py)


class RunDirCallback(TrainerCallback):
    """Mirrors every log() of rank 0 into metrics.jsonl (GRPOTrainer.log() has merged its reward/completion and
    our memory metrics into `logs` by then) and into a user's own tracker (logger._target_: with the run's memory
    peaks so far), and re-arms the stall watchdog at every finished step."""

    def __init__(self, run_dir: Path, rank: int, watchdog: StallWatchdog, tracker: Trackers | None = None):
        self.writer = rundir.MetricsWriter(run_dir) if rank == 0 else None
        self.tracker = tracker
        self.peaks: dict[str, float] = {}  # memory/peak/*: the run's so far
        self.watchdog = watchdog
        self.first_logs: dict = {}
        self.last_logs: dict = {}
        self.step = 0  # the last finished step: what a run that ends early kept

    def on_train_begin(self, args, state, control, **kwargs):
        self.watchdog.arm()

    def on_step_end(self, args, state, control, **kwargs):
        self.watchdog.arm()
        self.step = state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        self.watchdog.disarm()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.writer is None or not logs:
            return
        if "train_runtime" not in logs:  # that one is Trainer's end-of-run summary, not a step
            self.writer.write(state.global_step, logs)
            self.first_logs = self.first_logs or dict(logs)
            progress.info(progress_line(state.global_step, state.max_steps, logs))
            if self.tracker is not None:
                self.tracker.log({**logs, **run_peaks(logs, self.peaks)}, state.global_step)
        self.last_logs.update(logs)


def progress_line(step: int, max_steps: int, logs: dict) -> str:
    """One short console line per logging step: step, loss, reward, the largest memory peak of one process."""
    peaks = {
        k: v
        for k, v in logs.items()
        if metrics.MEMORY.fullmatch(k) and isinstance(v, (int, float)) and not k.endswith(f"/{metrics.NODE_RSS}_gib")
    }
    top = max(peaks, key=peaks.__getitem__, default=None)
    named = metrics.MEMORY.fullmatch(top) if top else None  # every key of `peaks` matched it
    peak = f"  peak {peaks[top]:.2f} GiB ({' '.join(named.groups())})" if top and named else ""
    loss, reward = logs.get("loss"), logs.get("reward")
    done = round(20 * step / max_steps) if max_steps > 0 else 0
    return (
        f"[{'#' * done}{'.' * (20 - done)}] step {step}/{max_steps}"
        + (f"  loss {loss:.4f}" if isinstance(loss, float) else "")
        + (f"  reward {reward:.3f}" if isinstance(reward, float) else "")
        + peak
    )


class SaveAndStop(TrainerCallback):
    """Preemption's side in the trainer: at every step's end the ranks agree whether any was asked to stop (a
    collective every step: they must stop at the same step), then save and stop together."""

    def __init__(self, preemption: Preemption, world_size: int):
        self.preemption, self.world_size = preemption, world_size

    def on_train_begin(self, args, state, control, **kwargs):
        self.preemption.training = True

    def on_step_end(self, args, state, control, **kwargs):
        requested = self.preemption.signal_name is not None
        if self.world_size > 1:
            device = "cuda" if dist.get_backend() == "nccl" else "cpu"  # NCCL reduces CUDA tensors only
            flag = torch.tensor([float(requested)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            requested = bool(flag.item())
            if requested and self.preemption.signal_name is None:
                self.preemption.signal_name = "a peer's stop request"
        if requested:
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.preemption.training = False
