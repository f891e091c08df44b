"""The one place processes are started: this machine's training processes, one per GPU (or
`topology.cpu_procs` on CPU), via torchrun when there is more than one.

Every process of a run lives in one new process session, so the driver can end all of them
(Ctrl-C, SIGTERM) and nothing outlives the run. Their output goes to the terminal and train.log.
"""

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import rundir

log = logging.getLogger(__name__)

STOP_GRACE_S = 10  # SIGTERM, then SIGKILL after this long


def visible_gpus() -> int:
    """CUDA GPUs this process may use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES. No torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver / library: a CPU machine
        return 0


def world_size(cfg: DictConfig, gpus: int) -> int:
    """Training processes on this machine: one per GPU (never nn.DataParallel), else cpu_procs."""
    if gpus == 0:
        return cfg.topology.cpu_procs
    return cfg.topology.gpus_per_node or gpus


def needs_hub(cfg: DictConfig) -> bool:
    """Whether the run reads anything from the HF hub (a hub model id or hub dataset id)."""
    model = cfg.model.name_or_path
    data = cfg.data.path
    model_from_hub = model is not None and not Path(model).expanduser().exists()
    data_from_hub = data is not None and not data.endswith((".json", ".jsonl"))
    return model_from_hub or data_from_hub


def worker_command(config_path: Path, nprocs: int) -> list[str]:
    worker = ["-m", "grpo_exp.worker", str(config_path)]
    if nprocs == 1:
        return [sys.executable, *worker]
    # --standalone: single-node rendezvous on a free local port, so concurrent runs never collide.
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}", *worker]


def worker_env(cfg: DictConfig) -> dict:
    env = dict(os.environ)
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    if not needs_hub(cfg):
        env["HF_HUB_OFFLINE"] = "1"  # the default path must never touch a hub
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Keep train.log readable: no per-file download/map progress bars (the step bar stays).
    env.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return env


def run_local(cfg: DictConfig, run_dir: Path, nprocs: int) -> int:
    """Run the workers to the end; return their exit code (130 if we were interrupted)."""
    cmd = worker_command(run_dir / rundir.CONFIG, nprocs)
    log.info("launching %d training process(es): %s", nprocs, " ".join(cmd))
    with open(run_dir / rundir.LOG, "a") as log_file:
        proc = subprocess.Popen(
            cmd,
            env=worker_env(cfg),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: one killpg ends every rank
            text=True,
            bufsize=1,
        )
        previous = signal.signal(signal.SIGTERM, lambda *_: _raise_interrupt())
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                log_file.write(line)
            return proc.wait()
        except KeyboardInterrupt:
            stop(proc)
            return rundir.EXIT_INTERRUPTED
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop(proc)  # also ends anything a rank left behind in the group


def _raise_interrupt():
    raise KeyboardInterrupt


def stop(proc: subprocess.Popen) -> None:
    """End the whole process group: SIGTERM, then SIGKILL after STOP_GRACE_S."""
    if proc.poll() is not None:
        _kill_group(proc.pid, signal.SIGKILL)  # leader is gone; stragglers get no grace
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _kill_group(proc.pid, sig):
            return
        try:
            proc.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:  # nobody left in the group
        return False
