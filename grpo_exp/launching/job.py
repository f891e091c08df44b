"""The driver's job, as a plain function: one composed config from its checks to its end.

    finalize(cfg, explicit)     what the config becomes before anything reads it (the one step that changes it):
                                TRL's aliases and coerced values, model=auto's numbers, free ports for `auto`
    check(cfg, run_dir, gpus)   every problem, stage by stage (config/checks, planning/checks,
                                launching/preflight), all in one report; pure
    run(job)                    resume or refuse, finalize, check, plan (plan.json), then action=plan prints it,
                                action=run launches this node's share (or the SLURM job) and concludes

`python -m grpo_exp` (__main__.py) is Hydra's side: it composes, fills a `Job` from Hydra's runtime and
prints the run report after; tests call run() in-process with a config they composed.
"""

import logging
import shutil
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpo_exp import Problem
from grpo_exp.config import config_checks, errors, keys, resume
from grpo_exp.core import gpus, outcome, rundir
from grpo_exp.core.outcome import LaunchFailed, Mismatch
from grpo_exp.core.records import Status, Summary
from grpo_exp.launching import launchers, ports, preflight
from grpo_exp.models import model_info
from grpo_exp.planning import fixes, placement, plan_file, plan_rules, planner
from grpo_exp.planning.report import headline, print_plan

log = logging.getLogger("grpo_exp")


@dataclass
class Job:
    """One job as Hydra hands it over (or a test builds it)."""

    cfg: DictConfig
    run_dir: Path  # this node's dir: Hydra's output dir, nodes/<N>/ below it for node N > 0
    sweeping: bool = False  # a trial of a multirun: its refusals and OOMs are results, not the process's end
    explicit: set[str] = field(default_factory=set)  # keys the user set (command line, experiment file)
    unknown: list[Problem] = field(default_factory=list)  # command-line keys the schema lacks, found before composing
    overrides: list[str] = field(default_factory=list)  # the command line's overrides (resume= keeps some)
    independent_trials: bool = True  # the sweeper fixes its trials up front (not Optuna): SLURM runs them at once
    gpus: int | None = None  # GPUs of this machine; None: detected
    notes: list[str] = field(default_factory=list)  # said in the plan (an option chosen over an experiment's values)


@dataclass
class Ended:
    """How a job ended: its exit code, run dir and summary; `launched` when processes ran (a run report
    follows), `memory` the memory plan where one was made."""

    code: int
    run_dir: Path | None
    summary: Summary = field(default_factory=Summary)
    launched: bool = False
    memory: planner.MemoryPlan | None = None

    def objective(self, metric: str, direction: str = "maximize") -> float:
        """A sweep's objective: `metric` (optimized_metric) of a completed run; a run that did not complete, or has
        no such figure, scores the worst there is in `direction` (-inf maximizing, +inf minimizing), so the search
        learns to keep away from it: 0 would beat every completed trial of a metric below zero (a reward of -1)."""
        value = rundir.optimized(self.summary, metric) if self.code == outcome.EXIT_OK else None
        if value is None:
            return float("-inf") if direction == "maximize" else float("inf")
        return value


def run(job: Job) -> Ended:
    """One job: check, plan, freeze the config, launch. Nothing is launched while any problem is found."""
    cfg, run_dir = job.cfg, job.run_dir
    if cfg.resume:  # continue that run: its own dir and frozen config (Hydra's fresh dir stays empty)
        cfg, run_dir, ended = _resumed(cfg, run_dir, job.overrides)
        if ended is not None:
            return ended
    elif not job.sweeping and (reused := reused_run_dir(run_dir)):  # Hydra wrote .hydra/ here already
        errors.report(str(reused))
        return Ended(outcome.EXIT_INVALID, None)
    plan, problems = None, finalize(cfg, job.explicit, run_dir)
    cards = gpus.detect() if job.gpus is None else []  # this machine's cards: what topology=local plans against
    if not problems:  # the checks read what finalize fills in (model=auto's numbers)
        plan, problems = check(cfg, run_dir, gpus.count() if job.gpus is None else job.gpus, cards)
    # unknown keys were left out of composing: the rest was checked beside them; there is a plan where no problem is
    if job.unknown or problems or plan is None:
        return _refuse(run_dir, job.unknown + problems, job.sweeping)
    memory = _memory_plan(cfg, plan)
    memory.notes = job.notes + memory.notes
    if cfg.action == "run":
        warnings = placement.card_warnings(cfg.topology, cards)
        for warning in warnings:
            log.warning(warning)
        memory.notes += warnings
    if cfg.action == "plan":
        memory.notes += preflight.unchecked_data(cfg)
    launcher = launchers.of(cfg)
    files, problems = launcher.build(cfg, plan, memory)  # its files beside plan.json, checked before any is written
    if problems:
        return _refuse(run_dir, problems, job.sweeping)
    rundir.freeze_config(cfg, run_dir)
    plan_file.write(run_dir, plan, memory)
    launcher.write(run_dir, files)
    if cfg.action == "plan":
        return _planned(cfg, run_dir, plan, memory, job.sweeping)
    print(headline(cfg, plan))
    print(placement.describe(plan))
    if not memory.fits and not _run_anyway(cfg, memory):
        summary = outcome.refused(
            run_dir,
            Status.PREDICTED_OOM,
            wall_s=0.0,
            suggestions=memory.suggestions,
            error="preflight predicts an OOM"
            + "".join(f": {e}" for e in memory.errors[:1] if e.startswith("host RAM"))
            + "; see plan.json (preflight.on_oom=warn runs anyway)",
        )
        log.error("refused: predicted OOM (exit %d); preflight.on_oom=warn tries anyway", outcome.EXIT_PREDICTED_OOM)
        return Ended(outcome.EXIT_PREDICTED_OOM, run_dir, summary, memory=memory)
    return _launch(cfg, run_dir, plan, job)


def finalize(cfg: DictConfig, explicit: set[str], run_dir: Path | None = None) -> list[Problem]:
    """Make `cfg` what every later step reads, in place: TRL's and transformers' aliases and coerced values
    (`explicit`: the keys the user set), model=auto's architecture numbers from config.json, free ports for
    `auto`, and on Kubernetes the job's name and its pods' addresses. The problems that stop it (an
    interpolation that does not resolve, a bad port, a model whose config.json cannot be read)."""
    try:  # every interpolation resolves (${oc.env:...} of an unset variable does not), to a value of its key's type
        mistyped = errors.mistyped_interpolations(cfg)
    except OmegaConfBaseException as exc:
        return errors.unresolvable(cfg) or [errors.as_problem(exc)]
    if mistyped:
        return mistyped
    problems = ports.check_values(cfg) + keys.resolve(cfg, set(explicit)) + model_info.complete(cfg.model)
    problems += launchers.check(cfg)
    if not problems:
        launcher = launchers.of(cfg)
        launcher.finalize(cfg, run_dir)
        ports.resolve_auto(cfg, launcher.PICKS_PORTS_HERE)  # before the plan's commands and config.yaml name them
        # Every value final: resolve the interpolations once, here, rather than in each check and plan that reads
        # them (each resolution re-parses its ${...}), and the frozen config.yaml says exactly what was checked.
        OmegaConf.resolve(cfg)
    return problems


def check(cfg: DictConfig, run_dir: Path, gpus: int, cards=()) -> tuple[placement.Plan | None, list[Problem]]:
    """The launch plan of a finalized `cfg` and every problem with it, stage by stage: the config alone
    (config/config_checks.py), then what needs the plan (planning/plan_rules.py), then this machine
    (launching/preflight.py: all of it for action=run, the data files it can see for action=plan). A stage
    runs when the keys it reads passed the stages before; every problem found is reported together."""
    plan, problems = _placed(cfg, run_dir / rundir.CONFIG, gpus, cards)
    if plan is not None:
        batch_known = "data.num_samples" not in {p.key for p in problems}
        problems += launchers.of(cfg).check(cfg, plan, gpus, batch_known=batch_known)
    return plan, problems


def _placed(cfg: DictConfig, config_path: Path, gpus: int, cards=()) -> tuple[placement.Plan | None, list[Problem]]:
    """The launch plan of a finalized `cfg` and the problems the config and the plan have (stages 1 and 2)."""
    problems = config_checks.check(cfg)
    if {p.key for p in problems} & (config_checks.PLAN_INPUTS | plan_rules.BATCH_INPUTS):
        return None, problems  # a plan for 0 processes (or 10^30 nodes) says nothing useful
    plan = placement.make_plan(cfg, str(config_path), detected_gpus=gpus, cards=cards)
    return plan, problems + plan_rules.check(cfg, plan)


def verdict(
    cfg: DictConfig,
    gpus: int,
    explicit: AbstractSet[str] = frozenset(),
    config_path: Path = Path(rundir.CONFIG),
    frozen: bool = False,
    cards: Sequence = (),
) -> tuple[placement.Plan | None, planner.MemoryPlan | None, list[Problem]]:
    """The driver's plan of `cfg` and its memory verdict, launching and writing nothing: finalized as a run is
    (aliases, coerced values, model=auto's numbers, the launcher's own), checked (config and plan), then the memory
    plan (preflight.on_oom=fit included). The frontier sweeper plans each trial here and `grpo-exp calibrate` each
    measured run, so what they call fitting is what the driver calls fitting. `explicit`: the keys the user set.
    `frozen`: a run's config.yaml, finalized and checked when it ran (by the grpo_exp of its day, whose keys may
    differ): planned as it is, on the `cards` it ran on (its plan.json's), the memory plan the driver made before
    deciding to run it. (plan, memory plan, problems); no memory plan with problems."""
    if frozen:
        as_ran = placement.make_plan(cfg, str(config_path), detected_gpus=gpus, cards=cards)
        return as_ran, planner.memory_plan(cfg, as_ran), []
    problems = finalize(cfg, set(explicit), None)
    if problems:
        return None, None, problems
    plan, problems = _placed(cfg, config_path, gpus)
    if plan is None or problems:
        return plan, None, problems
    return plan, _memory_plan(cfg, plan), []


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


def _resumed(cfg: DictConfig, run_dir: Path, overrides: list[str]):
    """resume=<run dir>: (its frozen config with the resumable overrides, its dir, None), or how the job
    ended when there is nothing to resume (refused, or completed already)."""
    resumed, problems = resume.load(cfg, overrides)
    _remove_if_empty(run_dir)
    if resumed is None or problems:
        errors.report("\n".join(map(str, problems)))
        return None, None, Ended(outcome.EXIT_INVALID, None)
    run_dir = Path(resumed.resume)
    done = rundir.read_summary(run_dir)
    if done.get("status") == Status.COMPLETED and 0 <= resumed.trainer.max_steps <= (done.get("global_step") or 0):
        log.info("%s already completed at step %s; nothing to resume", run_dir, done.get("global_step"))
        return None, None, Ended(outcome.EXIT_OK, run_dir, done)
    return resumed, run_dir, None


def _refuse(run_dir: Path, problems: list[Problem], sweeping: bool) -> Ended:
    """Every problem in one report, exit 2; in a sweep the invalid combination is one of the results."""
    errors.report("\n".join(map(str, problems)))
    if sweeping:
        return Ended(
            outcome.EXIT_INVALID,
            run_dir,
            outcome.refused(run_dir, Status.INVALID, error="\n".join(map(str, problems))),
        )
    _remove_if_empty(run_dir)  # a rejected config leaves nothing behind but the error
    return Ended(outcome.EXIT_INVALID, None)


def _memory_plan(cfg: DictConfig, plan) -> planner.MemoryPlan:
    """planner.memory_plan's, or where it does not fit and preflight.on_oom=fit, the plan of the change that fits."""
    memory = planner.memory_plan(cfg, plan)
    return _fit(cfg, plan, memory) if not memory.fits and cfg.preflight.on_oom == "fit" else memory


def _fit(cfg: DictConfig, plan, memory: planner.MemoryPlan) -> planner.MemoryPlan:
    """Apply the planner's change that fits and keeps the experiment (preflight.on_oom=fit)."""
    changes = fixes.fit(cfg, plan)
    if changes is None:
        log.error("preflight.on_oom=fit: no change that keeps the experiment the same fits; the ranked fixes follow")
        return memory
    for key, old, new in changes:
        OmegaConf.update(cfg, key, new, force_add=True)
        cfg.preflight.fitted.append(f"{key}: {old} -> {new}")
        log.warning("preflight.on_oom=fit: %s %s -> %s", key, old, new)
    return planner.memory_plan(cfg, plan)


def _planned(cfg: DictConfig, run_dir: Path, plan, memory: planner.MemoryPlan, sweeping: bool) -> Ended:
    """action=plan: print the plan (in a sweep, one line per trial and the table at the end)."""
    if sweeping:
        top = memory.suggestions[0]["text"] if memory.suggestions else None
        summary = outcome.refused(
            run_dir, Status.PLANNED, fits=memory.fits, suggestion=top, **plan_file.summary_keys(memory.to_dict())
        )
        verdict = "fits" if memory.fits else "OOM"
        log.info("%s: %s, peak %.2f GiB per training process", run_dir.name, verdict, memory.train["peak_gib"])
        return Ended(outcome.EXIT_OK, run_dir, summary, memory=memory)
    print(headline(cfg, plan))
    print(placement.describe(plan))
    print_plan(memory)
    log.info("plan written to %s", run_dir / rundir.PLAN)
    return Ended(outcome.EXIT_OK, run_dir, memory=memory)


def _run_anyway(cfg: DictConfig, memory: planner.MemoryPlan) -> bool:
    print_plan(memory)
    if cfg.preflight.on_oom in ("refuse", "fit"):
        return False
    log.warning("preflight predicts an OOM; running anyway (preflight.on_oom=warn)")
    return True


def _launch(cfg: DictConfig, run_dir: Path, plan, job: Job) -> Ended:
    """Start this node's share (or submit the SLURM job, or apply the Kubernetes one), wait for it, conclude."""
    if cfg.preflight.fitted:
        outcome.note(run_dir, preflight_fit=[_fitted(item) for item in cfg.preflight.fitted])
    node = plan.nodes[cfg.topology.node_rank]
    if cfg.resume:
        checkpoint = rundir.latest_checkpoint(run_dir)
        outcome.record_resume(run_dir, checkpoint[1] if checkpoint else 0)
        log.info("resuming %s from %s", run_dir, checkpoint[0] if checkpoint else "step 0 (no checkpoint was saved)")
    rundir.clear_rank_records(run_dir)  # a resumed run's last attempt is in summary.json already
    outcome.started(run_dir, world_size=plan.world_size, node_rank=node.node_rank)
    log.info("run dir %s", run_dir)
    launcher = launchers.of(cfg)
    detaching = launcher.detaches(cfg, job.sweeping, job.independent_trials)
    if detaching and isinstance(launcher, launchers.Submitter):  # submitted: the driver goes on
        code, summary = launcher.submit(cfg, run_dir, plan)
        if code != outcome.EXIT_OK:
            log.error("%s: %s", run_dir.name, summary.get("error"))
        return Ended(code, run_dir, summary)
    started = time.time()
    outcome.note(run_dir, started_at=started)
    try:
        code = launcher.run(cfg, run_dir, plan, node)
    except LaunchFailed as exc:  # SLURM or kubectl refused the job, or the vLLM server never answered or died
        outcome.node_failed(run_dir, node.node_rank, Status.FAILED, str(exc))
        code = outcome.EXIT_FAILED
    except Mismatch as exc:  # a dedicated serving node runs another config
        outcome.node_failed(run_dir, node.node_rank, Status.MISMATCH, str(exc))
        code = outcome.EXIT_HANG_PREVENTED
    summary = outcome.concluded(run_dir, code, started)
    log.info("%s in %.1fs -> %s", summary["status"], summary["wall_s"], run_dir / rundir.SUMMARY)
    return Ended(outcome.exit_code(summary), run_dir, summary, launched=True)


def _fitted(item: str) -> dict:
    """preflight.fitted's "key: old -> new" as {key, old, new}."""
    key, change = item.split(": ", 1)
    old, new = change.split(" -> ", 1)
    return {"key": key, "old": old, "new": new}


def _remove_if_empty(run_dir: Path) -> None:
    """Remove a run dir holding only what Hydra put there before our code ran; for node N > 0, also
    the shared run dir above nodes/<N>/ if that leaves it holding nothing else."""
    for path in (run_dir, run_dir.parent, run_dir.parent.parent) if run_dir.parent.name == rundir.NODES else (run_dir,):
        if path.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in path.iterdir()):
            shutil.rmtree(path, ignore_errors=True)
