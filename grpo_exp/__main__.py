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

from grpo_exp import CONF_DIR, Problem
from grpo_exp.config import checks as config_checks
from grpo_exp.config import errors, keys, model_info, overrides, resume
from grpo_exp.config.schema import register_configs
from grpo_exp.core import outcome, rundir
from grpo_exp.core.outcome import LaunchFailed, Mismatch
from grpo_exp.launching import launch, ports, preflight
from grpo_exp.planning import checks as plan_checks
from grpo_exp.planning import placement, planner
from grpo_exp.results import report

log = logging.getLogger("grpo_exp")


@dataclass
class _Session:
    """What the jobs of this process leave for main(): hydra.main returns nothing, so a job's exit
    code and its sweep dir are kept here (submitted SLURM trials: slurm.PENDING), and the command
    line's unknown keys, found before composing, wait here to join the job's report."""

    exit_codes: list[int] = field(default_factory=list)
    sweep_dirs: set[str] = field(default_factory=set)
    unknown_keys: list[Problem] = field(default_factory=list)


_session = _Session()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def run(cfg: DictConfig) -> float:
    """One job: check, plan, freeze the config, launch, report. Returns the sweep objective:
    tokens/s of a completed run, else 0 (Optuna maximises it)."""
    hydra_cfg = HydraConfig.get()
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    run_dir = Path(hydra_cfg.runtime.output_dir) / rundir.node_subdir(cfg.topology.node_rank)
    if sweeping:
        _session.sweep_dirs.add(hydra_cfg.sweep.dir)
    if cfg.resume:  # continue that run: its own dir and frozen config (Hydra's fresh dir stays empty)
        cfg, run_dir, ended = _resumed(cfg, run_dir, task_overrides(hydra_cfg))
        if ended is not None:
            return ended
    elif not sweeping and (reused := reused_run_dir(run_dir)):  # Hydra wrote .hydra/ here already
        errors.report(str(reused))
        return _done(outcome.EXIT_INVALID)
    plan, problems = check(cfg, run_dir, launch.visible_gpus(), explicit_keys(hydra_cfg))
    problems = _session.unknown_keys + problems
    if problems:
        return _refuse(run_dir, problems, sweeping)
    memory = _memory_plan(cfg, plan)
    rundir.freeze_config(cfg, run_dir)
    rundir.write_json(
        run_dir / rundir.PLAN, {**plan.to_dict(), **memory, "vllm": {**plan.vllm, **(memory["vllm"] or {})}}
    )
    if cfg.action == "plan":
        return _planned(cfg, run_dir, plan, memory, sweeping)
    print(placement.describe(plan))
    if not memory["fits"] and not _run_anyway(cfg, memory):
        summary = outcome.write_status(
            run_dir,
            "predicted_oom",
            wall_s=0.0,
            suggestions=memory["suggestions"],
            error="preflight predicts an OOM; see plan.json (preflight.on_oom=warn runs anyway)",
        )
        log.error(
            "refused: predicted OOM (exit %d); run with preflight.on_oom=warn to try anyway", summary["exit_code"]
        )
        return _done(summary["exit_code"], summary)
    return _launch(cfg, run_dir, plan, hydra_cfg, sweeping)


def _resumed(cfg: DictConfig, run_dir: Path, task_overrides: list[str]):
    """resume=<run dir>: (its frozen config with the resumable overrides, its dir, None), or the
    job's return value when there is nothing to resume (refused, or completed already)."""
    cfg, problems = resume.load(cfg, task_overrides)
    _remove_if_empty(run_dir)
    if problems:
        errors.report("\n".join(map(str, problems)))
        return None, None, _done(outcome.EXIT_INVALID)
    run_dir = Path(cfg.resume)
    done = rundir.read_summary(run_dir)
    if done.get("status") == "completed" and 0 <= cfg.trainer.max_steps <= (done.get("global_step") or 0):
        log.info("%s already completed at step %s; nothing to resume", run_dir, done.get("global_step"))
        return None, None, _done(outcome.EXIT_OK, done)
    return cfg, run_dir, None


def _refuse(run_dir: Path, problems: list[Problem], sweeping: bool) -> float:
    """Every problem in one report, exit 2; in a sweep the invalid combination is one of the results."""
    errors.report("\n".join(map(str, problems)))
    if sweeping:
        outcome.write_status(run_dir, "invalid", error="\n".join(map(str, problems)))
    else:
        _remove_if_empty(run_dir)  # a rejected config leaves nothing behind but the error
    return _done(outcome.EXIT_INVALID)


def _memory_plan(cfg: DictConfig, plan) -> dict:
    memory = planner.preflight(cfg, plan)
    return _fit(cfg, plan, memory) if not memory["fits"] and cfg.preflight.on_oom == "fit" else memory


def _planned(cfg: DictConfig, run_dir: Path, plan, memory: dict, sweeping: bool) -> float:
    """action=plan: print the plan (in a sweep, one line per trial and the table at the end)."""
    if sweeping:
        top = memory["suggestions"][0]["text"] if memory["suggestions"] else None
        outcome.write_status(run_dir, "planned", fits=memory["fits"], suggestion=top, **planner.summary_keys(memory))
        verdict = "fits" if memory["fits"] else "OOM"
        log.info("%s: %s, peak %.2f GiB per training process", run_dir.name, verdict, memory["train"]["peak_gib"])
        return _done(outcome.EXIT_OK)
    print(placement.describe(plan))
    planner.print_report(memory)
    log.info("plan written to %s", run_dir / rundir.PLAN)
    return _done(outcome.EXIT_OK)


def _run_anyway(cfg: DictConfig, memory: dict) -> bool:
    planner.print_report(memory)
    if cfg.preflight.on_oom in ("refuse", "fit"):
        return False
    log.warning("preflight predicts an OOM; running anyway (preflight.on_oom=warn)")
    return True


def _launch(cfg: DictConfig, run_dir: Path, plan, hydra_cfg, sweeping: bool) -> float:
    """Start this node's share (or submit the SLURM job), wait for it, conclude and report."""
    if cfg.preflight.fitted:
        rundir.write_summary(
            run_dir, preflight_fit=[{"key": k, "old": o, "new": n} for k, o, n in _fitted_changes(cfg)]
        )
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
    except LaunchFailed as exc:  # SLURM refused the job, or the vLLM server never answered
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

    try:
        if cfg.launcher.slurm.wait:
            slurm.submit_pending(cfg, run_dir, plan)
        else:
            job = slurm.submit(cfg, run_dir, plan)
            print(f"submitted SLURM job {job.job_id}: {run_dir}  (python -m grpo_exp.compare {run_dir})")
    except slurm.Refused as exc:  # this trial's job only: the sweep goes on
        summary = outcome.write_status(run_dir, "failed", error=str(exc), wall_s=0.0)
        log.error("%s: %s", run_dir.name, exc)
        return _done(summary["exit_code"], summary)
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


def check(
    cfg: DictConfig, run_dir: Path, gpus: int, explicit: set[str] = frozenset()
) -> tuple[placement.Plan | None, list[Problem]]:
    """The launch plan for `cfg` and every problem with it, stage by stage: the config alone
    (config/checks.py), then what needs the plan (planning/checks.py), then - for action=run - this
    machine (launching/preflight.py). A stage runs when the keys it reads passed the stages before;
    every problem found is reported together. `explicit`: the keys the user set (for aliases).
    model=auto: the architecture numbers are read from config.json first, since every check reads them."""
    try:
        OmegaConf.to_container(
            cfg, resolve=True
        )  # every interpolation resolves (${oc.env:...} of an unset variable does not)
    except OmegaConfBaseException as exc:
        return None, errors.unresolvable(cfg) or [errors.as_problem(exc)]
    problems = ports.check_values(cfg) + keys.resolve(cfg, set(explicit))
    problems += model_info.complete(cfg.model)
    if problems:
        return None, problems
    problems = config_checks.check(cfg)
    bad = {p.key for p in problems}
    if bad & (config_checks.PLAN_INPUTS | plan_checks.BATCH_INPUTS):
        return None, problems  # a plan for 0 processes (or 10^30 nodes) says nothing useful
    ports.resolve_auto(cfg)  # before the plan's commands and config.yaml name the ports
    plan = placement.make_plan(cfg, str(run_dir / rundir.CONFIG), detected_gpus=gpus)
    problems += plan_checks.check(cfg, plan)
    if cfg.action == "run":
        problems += preflight.check(cfg, plan, gpus, batch_known="data.num_samples" not in bad)
    return plan, problems


def explicit_keys(hydra_cfg) -> set[str]:
    """The keys this job's user set: on the command line, and in the experiment file it selected."""
    found = set(overrides.values(task_overrides(hydra_cfg)))
    name = hydra_cfg.runtime.choices.get("experiment")
    sources = [CONF_DIR] + [
        Path(s.path.removeprefix("file://")) for s in hydra_cfg.runtime.config_sources if s.provider == "command-line"
    ]
    for source in sources:
        path = source / "experiment" / f"{name}.yaml"
        if name and path.is_file():
            found |= {
                k
                for k in _flat_keys(OmegaConf.to_container(OmegaConf.load(path)))
                if not k.startswith(("defaults", "hydra"))
            }
    return found


def task_overrides(hydra_cfg) -> list[str]:
    """This job's command-line overrides as written: iterating Hydra's list would resolve an override's
    own `${...}` text, and fail on one that names an unset variable (that is the job's check to report)."""
    return OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False)


def _flat_keys(node, prefix: str = "") -> set[str]:
    out = set()
    for key, value in (node or {}).items():
        out |= _flat_keys(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {f"{prefix}{key}"}
    return out


def _done(code: int, summary: dict | None = None) -> float:
    _session.exit_codes.append(code)
    return float((summary or {}).get("throughput/tokens_per_s") or 0.0) if code == outcome.EXIT_OK else 0.0


def _remove_if_empty(run_dir: Path) -> None:
    """Remove a run dir holding only what Hydra put there before our code ran; for node N > 0, also
    the shared run dir above nodes/<N>/ if that leaves it holding nothing else."""
    for path in (run_dir, run_dir.parent, run_dir.parent.parent) if run_dir.parent.name == rundir.NODES else (run_dir,):
        if path.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in path.iterdir()):
            shutil.rmtree(path, ignore_errors=True)


def reused_run_dir(run_dir: Path) -> Problem | None:
    """A run dir belongs to one run: starting another in it would mix their metrics and overwrite
    its config and summary."""
    held = rundir.holds_run(run_dir)
    if held is None:
        return None
    return Problem(
        "hydra.run.dir",
        f"{run_dir} already holds a run (status: {held.get('status')}); a run dir belongs to one run",
        "leave hydra.run.dir at its default (unique per run) or choose a new one; to continue that run: python -m "
        f"grpo_exp resume={run_dir}",
    )


def _run_dir_argument(items: list[str]) -> Path | None:
    """hydra.run.dir given among the overrides of a single run (not a sweep, not a resume)."""
    parsed = {o.key_or_group: o.value() for o in overrides.parse(items)}
    if "hydra.run.dir" not in parsed or "resume" in parsed:
        return None
    rank = parsed.get("topology.node_rank", os.environ.get("NODE_RANK", "0"))  # conf/config.yaml's default
    return Path(str(parsed["hydra.run.dir"])).expanduser() / rundir.node_subdir(int(rank) if str(rank).isdigit() else 0)


def deepspeed_override(arg: str) -> str:
    """`deepspeed.<key>=v` -> `++deepspeed.<key>=v`: the deepspeed group is DeepSpeed's own open
    format, so any of its keys may be set without Hydra's `+` (config/checks.py checks them with
    DeepSpeed's config models instead)."""
    return f"++{arg}" if arg.startswith("deepspeed.") and "=" in arg else arg


def main() -> None:
    # Let Hydra's own config errors (unknown option/key, bad type) reach us as exceptions, so they
    # are reported like ours: the key, the valid options, exit 2, no traceback.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    register_configs()
    argv = [deepspeed_override(arg) for arg in sys.argv[1:]]
    given = overrides.command_line(argv)
    unknown = overrides.unknown(given)  # every unknown key at once, the rest still composed and checked
    _session.unknown_keys = list(unknown.values())
    sys.argv[1:] = [arg for arg in argv if arg not in unknown]
    run_dir = None if "-m" in argv or "--multirun" in argv else _run_dir_argument(given)
    reused = reused_run_dir(run_dir) if run_dir is not None else None
    if reused:  # before Hydra writes its .hydra/ record into that run's dir
        _exit_invalid([*_session.unknown_keys, reused])
    if not overrides.mode_needs_compose(argv):
        _skip_mode_compose()
    try:
        run()
    except (HydraException, OmegaConfBaseException, ValueError, OverflowError) as exc:
        if _session.exit_codes:  # a job ran: not a config error
            raise
        _exit_invalid([*_session.unknown_keys, errors.explain(exc)])
    if not _session.exit_codes and _session.unknown_keys:  # --cfg job, --help: nothing ran, yet keys are wrong
        _exit_invalid(_session.unknown_keys)
    if "grpo_exp.launching.slurm" in sys.modules:  # a parallel SLURM sweep: every trial's result before the table
        sys.modules["grpo_exp.launching.slurm"].gather()
    if _session.sweep_dirs:  # OOMs, predicted OOMs and failures of trials are results: the sweep completed
        from grpo_exp.results import compare

        for sweep_dir in sorted(_session.sweep_dirs):
            compare.print_table(compare.load_local(Path(sweep_dir)), title=f"sweep {sweep_dir}")
        sys.exit(0)
    sys.exit(_session.exit_codes[0] if _session.exit_codes else 0)  # --cfg, --help, --info: nothing ran


def _skip_mode_compose() -> None:
    """Hydra composes the config once to read hydra.mode, then again to run. When nothing on the
    command line can set the mode (overrides.mode_needs_compose), -m alone decides: Hydra's own rule
    for a mode it could not read (`hydra._internal.utils._run_app`), without the first compose."""
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = lambda self, config_name, overrides: None


def _exit_invalid(problems: list) -> None:
    errors.report("\n".join(map(str, problems)))
    sys.exit(outcome.EXIT_INVALID)


if __name__ == "__main__":
    main()
