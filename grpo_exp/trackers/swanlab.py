"""SwanLab (what ms-swift's users log to); `grpo-exp compare swanlab:<dir>` reads its offline runs below a dir."""

import os
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.config.overrides import values
from grpo_exp.core.records import Status
from grpo_exp.core.runs import Run
from grpo_exp.trackers.common import kept_run_id, run_config, run_group, run_name, run_tags, summary_metrics

REPORT_TO = "swanlab"
PACKAGE = "swanlab"
SOURCE = "swanlab"
ID_FILE = "swanlab_id"  # in the run dir: a resumed run continues the same SwanLab run


class Tracker:
    """SwanLab (what ms-swift's users log to) through transformers' SwanLabCallback, which logs into the run
    created here: project logger.project (SWANLAB_PROJECT overrides), the run's name, group and tags, the config.
    Mode: SWANLAB_MODE, else logger.mode, auto being online with SwanLab's credentials (SWANLAB_API_KEY or its
    login) and offline without: the run is written under <run dir>/swanlog (SWANLAB_LOG_DIR overrides) for
    `swanlab sync`. finish() logs the summary at the last step and ends the run with the status."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        import swanlab

        init = dict(
            project=os.environ.get("SWANLAB_PROJECT") or cfg.logger.project,
            experiment_name=run_name(cfg, run_dir),
            group=run_group(cfg, run_dir),
            tags=run_tags(cfg),
            config=run_config(cfg, run_dir),
            id=kept_run_id(run_dir / ID_FILE),
            resume="allow",
        )
        if "SWANLAB_LOG_DIR" not in os.environ:
            init["log_dir"] = str(run_dir / "swanlog")
        if "SWANLAB_MODE" not in os.environ:
            mode = cfg.logger.mode
            init["mode"] = ("online" if swanlab.Settings().api_key else "offline") if mode == "auto" else mode
        self.run = swanlab.init(**init)

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        status = summary.get("status", "unknown")
        step = int(summary.get("global_step") or 0)
        self.run.log(summary_metrics(summary), step=step)
        self.run.config.update({"status": status})  # compare reads it back (config.yaml of the run)
        if status == Status.COMPLETED:
            self.run.finish(state="success")
        elif status == Status.PREEMPTED:  # saved and stopped: it resumes into this run
            self.run.finish(state="aborted")
        else:
            self.run.finish(state="crashed", error=summary.get("error") or status)


def load_runs(log_dir: str, group: str | None = None) -> list[Run]:
    """Runs SwanLab wrote locally (logger=swanlab offline: <run dir>/swanlog, or SWANLAB_LOG_DIR), found anywhere
    below `log_dir`, read with the reader `swanlab sync` uses: each run's latest scalars (the summary it logged at
    its end included), its name, and the overrides and status from its config. A resumed run's attempts (one
    folder each, one id) are one run, the later attempt's values winning."""
    import yaml
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    attempts = sorted(Path(log_dir).rglob("run-*.swanlab"), key=lambda p: p.parent.name)  # run-<time>-<id>
    if not attempts:
        raise ValueError(f"no SwanLab runs below {log_dir} (run-*/run-<id>.swanlab)")
    runs: dict[str, dict] = {}
    for path in attempts:
        run = runs.setdefault(path.stem.removeprefix("run-"), {"name": None, "scalars": {}})
        reader = DataStoreReader()
        reader.open(path)
        for data in iter(reader.scan, None):
            record = Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "start":
                run["name"] = record.start.name
            elif kind == "scalar":
                run["scalars"][record.scalar.key] = record.scalar.value.number
        reader.close()
        config = yaml.safe_load((path.parent / "files" / "config.yaml").read_text()) or {}
        run["config"] = {key: entry["value"] for key, entry in config.items()}
    return [
        Run(
            r["name"],
            values(r["config"].get("overrides", [])),
            {**r["scalars"], "status": r["config"].get("status", "unknown")},
        )
        for r in runs.values()
    ]
