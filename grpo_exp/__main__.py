"""grpo_exp driver: compose the config once, check it, freeze it into the run dir, launch, report.

    python -m grpo_exp                                   # tiny model, this machine, a few GRPO steps
    python -m grpo_exp model=qwen7b topology=1x8 deepspeed=zero3 vllm=colocate
    python -m grpo_exp -m trainer.per_device_train_batch_size=2,4 trainer.num_generations=4,8
    python -m grpo_exp model=qwen7b topology=2x8 vllm=server action=plan   # plan.json, nothing run
    python -m grpo_exp --cfg job                         # the composed config, nothing run
    python -m grpo_exp --help                            # groups and options

Only this process calls Hydra. Training processes read <run dir>/config.yaml.

Exit codes of a single run (also summary.json["exit_code"]): 0 completed, 1 failed, 2 invalid
config, 3 predicted OOM (refused before launch), 4 out of memory, 5 hang prevented (nodes
disagree, a node never joined, training stalled), 130 interrupted. A multirun (-m, or a +sweep=
preset) exits 0 once every trial ran, whatever their statuses, and prints a table of them.
"""

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpo_exp.config import errors, model_info, resume
from grpo_exp.config.schema import register_configs
from grpo_exp.config.validate import validate
from grpo_exp.launching import launch, ports
from grpo_exp.launching.consistency import Mismatch
from grpo_exp.launching.vllm_server import ServerNotReady
from grpo_exp.planning import placement, planner
from grpo_exp.results import outcome, report, rundir

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
log = logging.getLogger("grpo_exp")


@dataclass
class _Session:
    """What the jobs of this process leave for main(): hydra.main returns nothing, so a job's exit
    code and its sweep dir are kept here (submitted SLURM trials: slurm.PENDING)."""

    exit_codes: list[int] = field(default_factory=list)
    sweep_dirs: set[str] = field(default_factory=set)


_session = _Session()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def run(cfg: DictConfig) -> float:
    """One job. Returns the sweep objective: tokens/s of a completed run, else 0 (Optuna maximises it)."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir) / rundir.node_subdir(cfg.topology.node_rank)
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    if sweeping:
        _session.sweep_dirs.add(hydra_cfg.sweep.dir)
    reused = None if (sweeping or cfg.resume) else reused_run_dir(run_dir)
    if reused:  # Hydra wrote .hydra/ here already; the run's own files stay untouched
        errors.report(str(reused))
        return _done(outcome.EXIT_INVALID)
    if cfg.resume:  # continue that run: its own dir and frozen config (Hydra's fresh dir stays empty)
        cfg, problems = resume.load(cfg, list(hydra_cfg.overrides.task))
        _remove_if_empty(run_dir)
        if problems:
            errors.report("\n".join(map(str, problems)))
            return _done(outcome.EXIT_INVALID)
        run_dir = Path(cfg.resume)
        done = rundir.read_summary(run_dir)
        if done.get("status") == "completed" and 0 <= cfg.trainer.max_steps <= (done.get("global_step") or 0):
            log.info("%s already completed at step %s; nothing to resume", run_dir, done.get("global_step"))
            return _done(outcome.EXIT_OK, done)
    gpus = launch.visible_gpus()
    plan, problems = check(cfg, run_dir, gpus)
    if problems:
        errors.report("\n".join(map(str, problems)))
        if sweeping:  # in a sweep an invalid combination is one of the results
            outcome.write_status(run_dir, "invalid", error="\n".join(map(str, problems)))
        else:
            _remove_if_empty(run_dir)  # a rejected config leaves nothing behind but the error
        return _done(outcome.EXIT_INVALID)

    memory = planner.preflight(cfg, plan)
    if not memory["fits"] and cfg.preflight.on_oom == "fit":
        memory = _fit(cfg, plan, memory)
    rundir.freeze_config(cfg, run_dir)
    placed = plan.to_dict()
    # plan.json "vllm": the placement (mode, server_node, gpus, tensor_parallel_size) and, when an
    # engine runs on its own GPUs, its memory estimate (peak_gib, components_gib, ...) in one object.
    vllm = {**placed["vllm"], **(memory["vllm"] or {})}
    rundir.write_json(run_dir / rundir.PLAN, {**placed, **memory, "vllm": vllm})
    if cfg.action == "plan" and sweeping:  # a planning sweep: one line per trial, the table at the end
        top = memory["suggestions"][0]["text"] if memory["suggestions"] else None
        outcome.write_status(run_dir, "planned", fits=memory["fits"], suggestion=top, **planner.summary_keys(memory))
        log.info("%s: %s, peak %.2f GiB per training process", run_dir.name, "fits" if memory["fits"] else "OOM", memory["train"]["peak_gib"])
        return _done(outcome.EXIT_OK)
    print(placement.describe(plan))
    if cfg.action == "plan":
        planner.print_report(memory)
        log.info("plan written to %s", run_dir / rundir.PLAN)
        return _done(outcome.EXIT_OK)
    if cfg.preflight.fitted:
        rundir.write_summary(run_dir, preflight_fit=[{"key": k, "old": o, "new": n} for k, o, n in _fitted_changes(cfg)])
    if not memory["fits"]:
        planner.print_report(memory)
        if cfg.preflight.on_oom in ("refuse", "fit"):
            summary = outcome.write_status(
                run_dir, "predicted_oom", wall_s=0.0, error="preflight predicts an OOM; see plan.json (preflight.on_oom=warn runs anyway)", suggestions=memory["suggestions"]
            )
            log.error("refused: predicted OOM (exit %d); run with preflight.on_oom=warn to try anyway", summary["exit_code"])
            return _done(summary["exit_code"], summary)
        log.warning("preflight predicts an OOM; running anyway (preflight.on_oom=warn)")

    node = plan.nodes[cfg.topology.node_rank]
    if cfg.resume:
        checkpoint = rundir.latest_checkpoint(run_dir)
        rundir.record_resume(run_dir, checkpoint[1] if checkpoint else 0)
        log.info("resuming %s from %s", run_dir, checkpoint[0] if checkpoint else "step 0 (no checkpoint was saved)")
    rundir.clear_rank_records(run_dir)  # a resumed run's last attempt is in summary.json already
    outcome.write_status(run_dir, "running", world_size=plan.world_size, node_rank=node.node_rank)
    log.info("run dir %s", run_dir)
    if cfg.launcher.name == "slurm" and (not cfg.launcher.slurm.wait or (sweeping and _trials_independent(hydra_cfg))):
        return _submit_without_waiting(cfg, run_dir, plan)
    started = time.time()
    rundir.write_summary(run_dir, started_at=started)
    try:
        if cfg.launcher.name == "slurm":
            from grpo_exp.launching import slurm

            code = slurm.submit_and_wait(cfg, run_dir, plan)
        else:
            code = launch.run_node(cfg, run_dir, node)
    except ServerNotReady as exc:
        rundir.write_rank_record(run_dir, node.node_rank, {"status": "failed", "error": str(exc)})
        code = outcome.EXIT_FAILED
    except Mismatch as exc:  # a dedicated serving node runs another config
        rundir.write_rank_record(run_dir, node.node_rank, {"status": "mismatch", "error": str(exc)})
        code = outcome.EXIT_HANG_PREVENTED
    summary = outcome.concluded(run_dir, code, started)
    log.info("%s in %.1fs -> %s", summary["status"], summary["wall_s"], run_dir / rundir.SUMMARY)
    if not sweeping:  # a sweep ends with its table instead
        report.print_report(run_dir, summary)
    return _done(summary["exit_code"], summary)


def _trials_independent(hydra_cfg) -> bool:
    """Hydra's basic sweeper fixes every trial up front, and the frontier sweeper launches one probe
    per num_generations line at a time and gathers them (slurm.gather) before choosing the next:
    their trials may run at once. Optuna picks each trial from the last result."""
    return hydra_cfg.sweeper._target_.rsplit(".", 1)[-1] in ("BasicSweeper", "FrontierSweeper")


def _submit_without_waiting(cfg: DictConfig, run_dir: Path, plan) -> float:
    """launcher=slurm: submit this trial's job and go on to the next one (at most max_parallel in
    flight; slurm.gather collects them), or with wait=false leave it to SLURM."""
    from grpo_exp.launching import slurm

    if cfg.launcher.slurm.wait:
        slurm.submit_pending(cfg, run_dir, plan)
    else:
        job = slurm.submit(cfg, run_dir, plan)
        print(f"submitted SLURM job {job.job_id}: {run_dir}  (python -m grpo_exp.compare {run_dir})")
    return _done(outcome.EXIT_OK)


def _fit(cfg: DictConfig, plan, memory: dict) -> dict:
    """Apply the planner's change that fits and keeps the experiment (preflight.on_oom=fit)."""
    changes = planner.fit(cfg, plan)
    if changes is None:
        log.error("preflight.on_oom=fit: no change that keeps the experiment the same fits; the ranked fixes follow")
        return memory
    for key, old, new in changes:
        OmegaConf.update(cfg, key, new, force_add=True)
        cfg.preflight.fitted.append(f"{key}: {old} -> {new}")
        log.warning("preflight.on_oom=fit: %s %s -> %s", key, old, new)
    return planner.preflight(cfg, plan)


def _fitted_changes(cfg: DictConfig) -> list[tuple[str, str, str]]:
    return [(item.split(": ", 1)[0], *item.split(": ", 1)[1].split(" -> ", 1)) for item in cfg.preflight.fitted]


def check(cfg: DictConfig, run_dir: Path, gpus: int) -> tuple[placement.Plan, list[errors.Problem]]:
    """The launch plan for `cfg` and every problem with it (model=auto: the architecture numbers
    are read from config.json first, since every other check reads them)."""
    problems = ports.check_values(cfg)
    ports.resolve_auto(cfg)  # before the plan's commands and config.yaml name the ports
    plan = placement.make_plan(cfg, str(run_dir / rundir.CONFIG), detected_gpus=gpus)
    return plan, problems + (model_info.complete(cfg.model) or validate(cfg, plan, gpus=gpus))


def _done(code: int, summary: dict | None = None) -> float:
    _session.exit_codes.append(code)
    return float((summary or {}).get("throughput/tokens_per_s") or 0.0) if code == outcome.EXIT_OK else 0.0


def _remove_if_empty(run_dir: Path) -> None:
    """Remove a run dir holding only what Hydra put there before our code ran; for node N > 0, also
    the shared run dir above nodes/<N>/ if that leaves it holding nothing else."""
    for path in (run_dir, run_dir.parent, run_dir.parent.parent) if run_dir.parent.name == rundir.NODES else (run_dir,):
        if path.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in path.iterdir()):
            shutil.rmtree(path, ignore_errors=True)


def reused_run_dir(run_dir: Path) -> errors.Problem | None:
    """A run dir belongs to one run: starting another in it would mix their metrics and overwrite
    its config and summary."""
    held = rundir.holds_run(run_dir)
    if held is None:
        return None
    return errors.Problem(
        "hydra.run.dir",
        f"{run_dir} already holds a run (status: {held.get('status')}); a run dir belongs to one run",
        f"leave hydra.run.dir at its default (unique per run) or choose a new one; to continue that run: python -m grpo_exp resume={run_dir}",
    )


def _run_dir_argument(argv: list[str]) -> Path | None:
    """hydra.run.dir given on the command line of a single run (not a sweep, not a resume)."""
    if any(a in ("-m", "--multirun") or a.startswith("resume=") for a in argv):
        return None
    given = [a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("hydra.run.dir=")]
    if not given:
        return None
    ranks = [a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("topology.node_rank=")]
    rank = ranks[-1] if ranks else os.environ.get("NODE_RANK", "0")  # conf/config.yaml's default
    return Path(given[-1].strip("'\"")).expanduser() / rundir.node_subdir(int(rank) if rank.isdigit() else 0)


def deepspeed_override(arg: str) -> str:
    """`deepspeed.<key>=v` -> `++deepspeed.<key>=v`: the deepspeed group is DeepSpeed's own open
    format, so any of its keys may be set without Hydra's `+` (validate checks them with
    DeepSpeed's config models instead)."""
    return f"++{arg}" if arg.startswith("deepspeed.") and "=" in arg else arg


def main() -> None:
    # Let Hydra's own config errors (unknown option/key, bad type) reach us as exceptions, so they
    # are reported like ours: the key, the valid options, exit 2, no traceback.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    register_configs()
    sys.argv[1:] = [deepspeed_override(arg) for arg in sys.argv[1:]]
    given = _run_dir_argument(sys.argv[1:])
    reused = reused_run_dir(given) if given is not None else None
    if reused:  # before Hydra writes its .hydra/ record into that run's dir
        errors.report(str(reused))
        sys.exit(outcome.EXIT_INVALID)
    try:
        run()
    except (HydraException, OmegaConfBaseException) as exc:
        errors.report(errors.explain(exc))
        sys.exit(outcome.EXIT_INVALID)
    if "grpo_exp.launching.slurm" in sys.modules:  # a parallel SLURM sweep: every trial's result before the table
        sys.modules["grpo_exp.launching.slurm"].gather()
    if _session.sweep_dirs:  # OOMs, predicted OOMs and failures of trials are results: the sweep completed
        from grpo_exp.results import compare

        for sweep_dir in sorted(_session.sweep_dirs):
            compare.print_table(compare.load_local(Path(sweep_dir)), title=f"sweep {sweep_dir}")
        sys.exit(0)
    sys.exit(_session.exit_codes[0] if _session.exit_codes else 0)  # --cfg, --help, --info: nothing ran


if __name__ == "__main__":
    main()
