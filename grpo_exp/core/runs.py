"""One run as `grpo-exp compare` and the trackers' readers see it: its name, the overrides it was given, its
summary, its run dir where it is local."""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.core import metrics, rundir
from grpo_exp.core.records import Status


@dataclass
class Run:
    name: str
    overrides: dict[str, str]
    summary: Mapping[str, Any]  # summary.json, or what a tracker kept of it
    path: Path | None = None  # the run dir (local runs)
    # with --calibration: the planner's train-phase error before and after the factors (percent)
    train_error_pct: float | None = None
    calibrated_error_pct: float | None = None

    @property
    def status(self) -> str:
        return self.summary.get("status", "unknown")

    @property
    def planned(self) -> bool:
        """A trial of a planning sweep (action=plan): predicted figures only."""
        return self.status == Status.PLANNED

    @property
    def peak_gib(self) -> float | None:
        """The run's peak memory per training process: GPU reserved if measured, else host RSS;
        for a planned trial, the planner's prediction."""
        if self.planned:
            return self.summary.get(metrics.plan_peak("train"))
        found = rundir.measured_peak(self.summary)
        return found[1] if found else None

    @property
    def planner_error_pct(self) -> float | None:
        planned, measured = self.summary.get(metrics.plan_peak("train")), self.peak_gib
        return 100 * (planned - measured) / measured if planned is not None and measured else None
