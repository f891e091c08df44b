"""trackio (local-first, what TRL's examples use); `grpo-exp compare trackio:<project>` reads a project's runs back."""

from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.config.overrides import values
from grpo_exp.core.runs import Run
from grpo_exp.trackers.common import run_config, run_group, run_name, run_tags, summary_metrics

REPORT_TO = "trackio"
PACKAGE = "trackio"
SOURCE = "trackio"


class Tracker:
    """trackio (local-first: an SQLite store under TRACKIO_DIR, its own default ~/.cache/huggingface/trackio)
    through transformers' TrackioCallback, in project logger.project. The callback gives its run neither a group
    nor our config, and trackio keeps a run's latest config: finish() adds the group, the config (the overrides,
    swept values and tags, over what the callback kept) with the status, and logs the summary as one more step."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.project, self.name = cfg.logger.project, run_name(cfg, run_dir)
        self.group = run_group(cfg, run_dir)
        self.config = {**run_config(cfg, run_dir), "tags": run_tags(cfg)}

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        import trackio
        from trackio.sqlite_storage import SQLiteStorage

        kept = {k: v for k, v in (SQLiteStorage.get_run_config(self.project, self.name) or {}).items() if k[0] != "_"}
        config = {**kept, **self.config, "status": summary.get("status", "unknown")}
        trackio.init(project=self.project, name=self.name, group=self.group, config=config, resume="must")
        trackio.log({**summary_metrics(summary), "status_code": float(exit_code)})
        trackio.finish()


def load_runs(project: str, group: str | None = None) -> list[Run]:
    """Runs of a trackio project in its local store (TRACKIO_DIR; logger=trackio): each run's latest metrics (the
    summary it logged at its end included), and the overrides and status its config keeps."""
    from trackio.sqlite_storage import SQLiteStorage

    names = SQLiteStorage.get_runs(project)
    if not names:
        raise ValueError(f"no trackio runs in project {project!r} (its store: TRACKIO_DIR)")
    out = []
    for name in names:
        latest: dict = {}
        for row in SQLiteStorage.get_logs(project, name):
            latest.update(row)
        config = SQLiteStorage.get_run_config(project, name) or {}
        out.append(
            Run(name, values(config.get("overrides", [])), {**latest, "status": config.get("status", "unknown")})
        )
    return out
