"""The one place processes are started: this node's share of the plan. On node 0 of a
`vllm=server` run that is the vLLM server (health-checked before training starts), then the
training processes (python, or torchrun for more than one).

Every process the driver starts gets its own process session, and the driver ends all of them
(Ctrl-C, SIGTERM, a crashed rank, the end of training): nothing outlives the run. Their output
goes to the terminal and to train.log.
"""

import atexit
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp import is_local_path
from grpo_exp.core import gpus, metrics, outcome, rundir
from grpo_exp.core.outcome import Mismatch
from grpo_exp.launching import oom_killer, serving, vllm_server
from grpo_exp.planning.placement import NodePlan

log = logging.getLogger(__name__)

STOP_GRACE_S = 10  # SIGTERM, then SIGKILL after this long (training: preemption.grace_s)
TAIL_LINES = 15  # a vLLM server's last lines, quoted when it ends the run


def needs_hub(cfg: DictConfig) -> bool:
    """Whether the run reads anything from the HF hub (a hub model id or hub dataset id)."""
    model = cfg.model.name_or_path
    data = cfg.data.path
    model_from_hub = model is not None and not is_local_path(model)
    data_from_hub = data is not None and not is_local_path(data)
    return model_from_hub or data_from_hub


def process_env(cfg: DictConfig, role_env: dict[str, str], procs: int = 1) -> dict[str, str]:
    env = {**os.environ, **role_env}
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # torchrun warns and sets 1 thread per process when this is unset; say what we want instead
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, procs))))
    if "CUDA_VISIBLE_DEVICES" not in role_env and gpus.count() == 0:
        env.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed would warn that it fell back to the CPU
    if not needs_hub(cfg):
        env["HF_HUB_OFFLINE"] = "1"  # the default path must never touch a hub
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Keep train.log readable: no per-file download/map progress bars (the step bar stays).
    env.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return env


class _Output:
    """Copies each process's output, line by line, to train.log and the terminal. A quiet console
    (logger.console=quiet, the default) shows only the one-line progress of each logging step and
    grpo_exp's own warnings and errors; everything else (TRL's metric dicts, library warnings, the
    W&B footer) is in train.log."""

    _PROGRESS = re.compile(r"\[rank\d+\] \S+ INFO grpo_exp\.progress: (.*)$")  # after tqdm's \r, if any
    _OURS = re.compile(r"^\[rank\d+\] \S+ (WARNING|ERROR|CRITICAL) grpo_exp")

    def __init__(self, path: Path, quiet: bool = False):
        self.file = open(path, "a")
        self.quiet = quiet
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.tails: dict[int, deque] = {}  # pid -> its last lines (a server that ends says why there)

    def _console(self, line: str) -> str | None:
        if not self.quiet:
            return line
        progress = self._PROGRESS.search(line)
        if progress:
            return f"  {progress.group(1)}\n"
        return line if self._OURS.match(line) else None

    def follow(self, proc: subprocess.Popen, prefix: str = "") -> None:
        tail = self.tails[proc.pid] = deque(maxlen=TAIL_LINES)

        def pump():
            for line in proc.stdout:
                tail.append(line)
                with self.lock:
                    shown = self._console(line)
                    if shown is not None:
                        sys.stdout.write(prefix + shown)
                    self.file.write(prefix + line)
                    self.file.flush()

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        self.threads.append(thread)

    def close(self) -> None:
        for thread in self.threads:
            thread.join(timeout=5)
        self.file.close()


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    # SLURM's time-limit warning (--signal=USR2@...) reaches every process of the job: torchrun and
    # vLLM would die of it (the default action), while the training ranks install their own handlers
    # (worker.Preemption) and save a checkpoint. An ignored signal stays ignored across exec, so the
    # children start with it ignored (preexec_fn is unsafe beside the output threads).
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        return subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # own process group: one killpg ends it and all its children
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_server(cfg: DictConfig, node: NodePlan, output: _Output) -> subprocess.Popen:
    """This node's vLLM server (the tiny model built first: the server loads its directory), its output followed."""
    if cfg.model.name_or_path is None:
        _build_tiny_model(cfg)
    where = f"GPUs {node.vllm_gpus}" if node.vllm_gpus else "CPU"  # no GPUs: vLLM's CPU build
    log.info("starting vLLM server on %s: %s", where, " ".join(node.commands["vllm"]))
    server = _start(node.commands["vllm"], process_env(cfg, node.env.get("vllm", {})))
    output.follow(server, prefix="[vllm] ")
    return server


def _wait_for_server(cfg: DictConfig, server: subprocess.Popen, output: _Output) -> None:
    waited = vllm_server.wait_healthy(
        vllm_server.health_url(cfg),
        cfg.vllm.server_timeout,
        is_alive=lambda: server.poll() is None,
        log_tail=lambda: list(output.tails[server.pid]),
    )
    log.info("vLLM server healthy after %.0fs", waited)


def run_node(cfg: DictConfig, run_dir: Path, node: NodePlan, log_path: Path | None = None) -> int:
    """Run this node's processes to the end; return the training exit code (130 if interrupted).
    Raises vllm_server.ServerNotReady if the server never became healthy (training not started),
    outcome.Mismatch if a dedicated serving node runs another config."""

    output = _Output(log_path or run_dir / rundir.LOG, quiet=cfg.logger.console == "quiet")
    procs: list[subprocess.Popen] = []
    server = server_memory = None
    code = outcome.EXIT_FAILED
    kills_before = None  # the kernel's OOM kills when training started (oom_killer.py)
    # SIGTERM (timeout, a workflow tool, SLURM preemption), SIGHUP (a closed terminal) and SIGUSR1/2
    # (SLURM's time-limit warning) end the run like Ctrl-C: the ranks save a checkpoint within
    # preemption.grace_s (under SLURM they got the signal themselves too) and the run is preempted.
    previous = arm_stop_signals()
    try:
        if "vllm" in node.commands:
            server = _start_server(cfg, node, output)
            procs.append(server)
            server_memory = vllm_server.ServerMemory(server.pid)
            _wait_for_server(cfg, server, output)
        if not node.train_procs:  # a dedicated serving node: serve until node 0 reports the run's end
            code = serving.serve_until_stopped(cfg, server, run_dir)
            return code
        if cfg.vllm.nodes:  # the server is the last node: start training once it answers
            waited = vllm_server.wait_healthy(vllm_server.health_url(cfg), cfg.vllm.server_timeout)
            log.info("serving node %s healthy after %.0fs", cfg.vllm.server_host, waited)
            if node.node_rank == 0:
                serving.check_fingerprint(cfg)
        log.info("launching %d training process(es): %s", node.train_procs, " ".join(node.commands["train"]))
        kills_before = oom_killer.kills()
        trainer = _start(node.commands["train"], process_env(cfg, node.env["train"], node.train_procs))
        procs.append(trainer)
        output.follow(trainer)
        remote = (
            vllm_server.RemoteWatch(vllm_server.health_url(cfg)) if cfg.vllm.nodes and node.node_rank == 0 else None
        )
        code = _wait(trainer, server, output, remote)
        return code
    except vllm_server.ServerDied as exc:  # said before the ranks' grace: a job killed meanwhile still names it
        outcome.ending(run_dir, str(exc))
        raise
    except KeyboardInterrupt:
        code = outcome.EXIT_INTERRUPTED
        return code
    except Mismatch:  # check_fingerprint told the serving node already
        code = outcome.EXIT_HANG_PREVENTED
        raise
    finally:
        for proc in reversed(procs):  # training first (it saves a checkpoint on SIGTERM), then its server
            stop(proc, cfg.preemption.grace_s if proc is procs[-1] and node.train_procs else STOP_GRACE_S)
        output.close()
        if server_memory is not None:  # the server's processes together, beside the plan's vllm role
            outcome.note(run_dir, **{metrics.peak("vllm", "host_rss_max"): server_memory.stop() / 2**30})
        if kills_before is not None and code not in (outcome.EXIT_OK, outcome.EXIT_INTERRUPTED):
            _record_oom_kills(run_dir, node, code, log_path or run_dir / rundir.LOG, kills_before)
        if cfg.vllm.nodes and node.train_procs and node.node_rank == 0 and code != outcome.EXIT_HANG_PREVENTED:
            serving.send_stop(cfg, outcome.status_of(run_dir, code))
        disarm(previous)


def _wait(trainer: subprocess.Popen, server: subprocess.Popen | None, output: _Output, remote=None) -> int:
    """The training processes' exit code; a server on this node that exits first ends the run (ServerDied, with its
    last lines) instead of leaving the trainers to wait on it, and so does a serving node's server that stops
    answering (`remote`: vllm_server.RemoteWatch)."""
    while True:
        try:
            return trainer.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if remote is not None:
            remote.check()
        if server is not None and server.poll() is not None:
            raise vllm_server.ServerDied(
                vllm_server.with_log_tail(
                    f"the vLLM server exited with code {server.returncode} while training ran",
                    list(output.tails[server.pid]),
                )
            )


def _build_tiny_model(cfg: DictConfig) -> None:
    """The tiny model's directory, built before a server loads it (the training ranks find it built). A process
    of its own: the driver does not import torch."""
    from omegaconf import OmegaConf

    built = subprocess.run(
        [sys.executable, "-m", "grpo_exp.training.tiny"],
        input=OmegaConf.to_yaml(cfg),
        capture_output=True,
        text=True,
        env=process_env(cfg, {}),
    )
    if built.returncode:  # the run ends failed, with the cause, like a server that never starts
        raise outcome.LaunchFailed(f"building the tiny model for the vLLM server failed:\n{built.stderr[-2000:]}")


def _record_oom_kills(run_dir: Path, node: NodePlan, code: int, log_path: Path, kills_before: int) -> None:
    """Training processes SIGKILL ended while the kernel's OOM-kill counter rose: recorded as host OOMs."""
    torchrun = "torch.distributed.run" in node.commands["train"]
    text = log_path.read_text(errors="replace") if torchrun and log_path.exists() else ""
    ranks = oom_killer.killed_ranks(text, code, single_rank=None if torchrun else 0)
    for rank in oom_killer.record(run_dir, node.node_rank, ranks, kills_before):
        log.error("rank %d was killed by the kernel's OOM killer: node %d ran out of host RAM", rank, node.node_rank)


# What stops a driver: Ctrl-C, SIGTERM (a scheduler, a workflow tool), SIGHUP (a closed terminal), SIGUSR1/2 (SLURM).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def raise_interrupt(signum, _frame):
    """The launchers' handler of STOP_SIGNALS: the first ends the run like Ctrl-C (their `except KeyboardInterrupt`
    stops what they started); from then on the driver is stopping (`_already_stopping`)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _already_stopping)
    # CPython puts a Python handler back to the default as the interpreter exits: a signal then would kill the driver
    # whose run is concluded (exit -2 instead of 75). Ignored from there on, the exit code stays the run's.
    atexit.register(_ignore_stop_signals)
    raise KeyboardInterrupt


def _ignore_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _already_stopping(signum, _frame):
    """A second (third, ...) stop signal while the run winds down (its ranks saving a checkpoint within
    preemption.grace_s, its jobs cancelled, its record concluded and reported) is said and waits for that, instead of
    cutting it short: a traceback from inside the cancel call, or summary.json left `running` with no step."""
    log.warning("%s: already stopping; the run ends once it has saved and been recorded", signal.Signals(signum).name)


def arm_stop_signals() -> dict:
    """Every stop signal ends the run (raise_interrupt); the handlers it replaced, for `disarm`."""
    return {sig: signal.signal(sig, raise_interrupt) for sig in STOP_SIGNALS}


def disarm(previous: dict) -> None:
    """The handlers before `arm_stop_signals`, unless a stop signal came: a stopping driver keeps saying so until it
    exits (its record is concluded after the launcher returns)."""
    if signal.getsignal(signal.SIGTERM) is _already_stopping:
        return
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """End `proc`'s whole process group: SIGTERM, then SIGKILL after `grace_s`."""
    if proc.poll() is None:
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc.pid, signal.SIGKILL)  # and whatever a rank left behind in the group


def _kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:  # nobody left in the group
        return False
