"""One training process: `python -m grpo_exp.training.worker <run dir>/config.yaml` (torchrun runs one per rank).

Reads the frozen config (never Hydra), builds the trainer (measured_trainer.py measures every phase of a
step), trains. Rank 0 writes metrics.jsonl as steps are logged; rank 0 always, and any rank that does not
complete, records how it ended in ranks/rank<N>.json, which the driver turns into summary.json.

A run dir is the unit of resumption: when <run dir>/checkpoints holds a checkpoint, training
continues from the latest one (rank 0 first drops metrics.jsonl lines after its step, which the run
logs again). SIGTERM, SIGUSR1 or SIGUSR2 (SLURM preemption, `--signal` before a time limit) asks
for a checkpoint at the next step boundary, agreed across ranks, then the run ends as `preempted`.

This module is the entry point and imports nothing heavy: the stop handler is installed before torch, transformers
and trl load (about 5 s on 2 cores) with rank_process.py, which holds a rank's steps (prepare, train, record), so a
stop in those seconds is still recorded.
"""

import logging
import os
import sys
from pathlib import Path

from grpo_exp import imports_frozen
from grpo_exp.core import outcome, rundir
from grpo_exp.training.preemption import Preemption


def main(config_path: str) -> int:
    """Read the frozen config, prepare this rank, train, record how it ended; the exit code of that end."""
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    _setup_logging(rank)
    preemption = Preemption()
    preemption.install()  # before torch loads (rank_process): a stop while it loads is still recorded
    cfg = rundir.load_config(config_path)
    if cfg.vllm.mode == "colocate":  # importing trl (rank_process) lowers vLLM's logging to ERROR unless it is set;
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")  # the engine's start-up lines carry its figures (vllm_log)
    run_dir = Path(config_path).resolve().parent
    if cfg.env.working_dir is not None:  # where the user's tools, environments and rewards open relative paths
        os.chdir(Path(cfg.env.working_dir).expanduser())
    with imports_frozen():  # garbage collector paused while they load: ~15% of their import
        # torch, transformers and trl load with the rank's code, after the stop handler (the module's docstring)
        from grpo_exp.training import rank_process

    state = rank_process.prepare(cfg, run_dir, rank, world_size)
    ended = rank_process.train(state, preemption)
    rank_process.record(state, ended)
    return outcome.EXIT_CODES[ended["status"]]


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stdout,
        force=True,
    )


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
