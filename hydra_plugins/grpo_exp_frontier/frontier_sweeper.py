"""`hydra/sweeper=frontier`: for each value of one axis (num_generations), the largest value of
another (per_device_train_batch_size) that runs without OOM, found by bisection.

The memory planner seeds each bisection: the first trial is the largest batch it predicts to fit,
so a good prediction settles an axis value in about two launches instead of the whole column of
the grid. A trial "fits" when its summary.json says completed; oom, predicted_oom and failed
trials do not. With action=plan nothing launches: each trial is the planner's verdict, so the
result is the planner's frontier (what fits on a cluster, answered on a laptop). Results go to
<sweep dir>/frontier.json. The lines advance together, one probe each per round, so under
launcher=slurm a round's probes run as concurrent jobs. Used through conf/sweep/frontier.yaml:

    python -m grpo_exp +sweep=frontier model=qwen7b topology=1x8
    python -m grpo_exp +sweep=frontier model=qwen7b topology=1x8 action=plan
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from grpo_exp.config import overrides
from grpo_exp.core import gpus, rundir
from grpo_exp.core.records import Status
from grpo_exp.launching import job, launchers

log = logging.getLogger(__name__)


@dataclass
class FrontierSweeperConf:
    _target_: str = "hydra_plugins.grpo_exp_frontier.frontier_sweeper.FrontierSweeper"
    batch_key: str = "trainer.per_device_train_batch_size"
    batch_values: List[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    axis_key: str = "trainer.num_generations"
    axis_values: List[Any] = field(default_factory=lambda: [4, 8])
    use_planner: bool = True  # seed each bisection with the planner's largest predicted fit


ConfigStore.instance().store(group="hydra/sweeper", name="frontier", node=FrontierSweeperConf, provider="grpo_exp")


@dataclass
class Line:
    """One axis value's bisection over the indices of batch_values: [lo, hi] still open, the next probe, the largest
    index that fitted so far."""

    lo: int
    hi: int
    probe: int
    best: int | None = None


class FrontierSweeper(Sweeper):
    # set by setup(), which Hydra calls before sweep()
    hydra_context: HydraContext
    config: DictConfig
    launcher: Launcher

    def __init__(
        self, batch_key: str, batch_values: List[int], axis_key: str, axis_values: List[Any], use_planner: bool = True
    ):
        self.batch_key, self.batch_values = batch_key, sorted(batch_values)
        self.axis_key, self.axis_values = axis_key, list(axis_values)
        self.use_planner = use_planner
        self.job_idx = 0

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _overrides(self, arguments: List[str], axis, batch) -> List[str]:
        return [*arguments, f"{self.axis_key}={axis}", f"{self.batch_key}={batch}"]

    def _planned_index(self, arguments: List[str], axis) -> int:
        """Index of the largest batch value the planner predicts to fit (0 if none; the middle one without
        the planner)."""
        if not self.use_planner:
            return len(self.batch_values) // 2
        best = 0
        for i, batch in enumerate(self.batch_values):
            trial = self._overrides(arguments, axis, batch)
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, trial)
            with open_dict(cfg):  # the config the trial's task gets: Hydra's own node left out, as Hydra does
                del cfg["hydra"]
            _, memory, _ = job.verdict(cfg, gpus.count(), set(overrides.values(trial)))  # the driver's own verdict
            if memory is not None and memory.fits:
                best = i
        return best

    def _run_round(self, arguments: List[str], probes: List[tuple]) -> List[dict]:
        """One probe per unfinished num_generations line, launched together: under launcher=slurm
        the driver submits them as concurrent jobs, gathered here before their summaries are read."""
        results = self.launcher.launch(
            [self._overrides(arguments, axis, batch) for axis, batch in probes], initial_job_idx=self.job_idx
        )
        self.job_idx += len(probes)
        launchers.gather()  # the round's SLURM jobs (none under launcher=local): their summaries are read next
        return [_trial(result, axis, batch) for result, (axis, batch) in zip(results, probes, strict=True)]

    def sweep(self, arguments: List[str]) -> Any:
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        trials = []
        # Each line bisects its own [lo, hi] range of batch indices; the lines advance together.
        top = len(self.batch_values) - 1
        lines = {axis: Line(0, top, self._planned_index(arguments, axis)) for axis in self.axis_values}
        while active := [axis for axis, line in lines.items() if line.lo <= line.hi]:
            for axis in active:
                line = lines[axis]
                line.probe = min(max(line.probe, line.lo), line.hi)
            round_trials = self._run_round(arguments, [(axis, self.batch_values[lines[axis].probe]) for axis in active])
            for axis, trial in zip(active, round_trials, strict=True):
                line = lines[axis]
                trials.append(trial)
                if trial["fits"]:
                    line.best, line.lo = line.probe, line.probe + 1
                else:
                    line.hi = line.probe - 1
                line.probe = (line.lo + line.hi + 1) // 2
        frontier = {}
        for axis, line in lines.items():
            frontier[str(axis)] = self.batch_values[line.best] if line.best is not None else None
            log.info(
                "frontier: %s=%s -> largest %s that fits: %s", self.axis_key, axis, self.batch_key, frontier[str(axis)]
            )
        report = {
            "axis_key": self.axis_key,
            "batch_key": self.batch_key,
            "frontier": frontier,
            **_best(trials, self.config.get("optimized_metric", "tokens_per_s")),
            "launches": len(trials),
            "grid_size": len(self.axis_values) * len(self.batch_values),
            "trials": trials,
        }
        (sweep_dir / "frontier.json").write_text(json.dumps(report, indent=2) + "\n")
        return report


def _trial(result: JobReturn, axis, batch) -> dict:
    if result.hydra_cfg is None or result.cfg is None:  # every Hydra launcher returns both
        raise RuntimeError(f"the trial {axis=}, {batch=} came back without its config")
    run_dir = Path(result.hydra_cfg.hydra.runtime.output_dir)
    summary = rundir.read_summary(run_dir)
    status = summary.get("status", Status.FAILED)
    # with action=plan every trial is the planner's verdict: the frontier it predicts, nothing launched
    fits = bool(summary.get("fits")) if status == Status.PLANNED else status == Status.COMPLETED
    value = rundir.optimized(summary, result.cfg.get("optimized_metric", "tokens_per_s"))
    return {"axis": axis, "batch": batch, "status": status, "fits": fits, "run_dir": str(run_dir), "metric": value}


def _best(trials: List[dict], metric: str) -> dict:
    """The fitted trial that is best by `metric` (optimized_metric), in that metric's direction; None when no
    fitted trial has it (a planning sweep measures nothing)."""
    scored = [t for t in trials if t["fits"] and t["metric"] is not None]
    pick = max if rundir.direction(metric) == "maximize" else min
    return {"optimized_metric": metric, "best": pick(scored, key=lambda t: t["metric"]) if scored else None}
