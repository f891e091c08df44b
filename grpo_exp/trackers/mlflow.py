"""MLflow through transformers' MLflowCallback; `grpo-exp compare mlflow:<experiment>` reads its runs back."""

import os
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.config.overrides import values
from grpo_exp.core import rundir
from grpo_exp.core.runs import Run
from grpo_exp.trackers.common import run_group, run_tags, summary_metrics

REPORT_TO = "mlflow"
PACKAGE = "mlflow"
SOURCE = "mlflow"


class Tracker:
    """MLflow through transformers' MLflowCallback: the server (MLFLOW_TRACKING_URI, unset: an SQLite store in
    the run dir), the experiment (MLFLOW_EXPERIMENT_NAME, unset: the run's group), our tags and the swept values
    (MLFLOW_TAGS, read back by `grpo-exp compare mlflow:<experiment>`). finish() adds the summary to that run."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        import json

        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # the URI stays out of train.log
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", run_group(cfg, run_dir))
        tags = dict(tag.split(":", 1) for tag in run_tags(cfg) if ":" in tag)
        tags["overrides"] = json.dumps(rundir.read_overrides(run_dir))
        os.environ.setdefault("MLFLOW_TAGS", json.dumps(tags))

    def ready(self) -> None:
        pass

    def finish(self, summary: dict, exit_code: int) -> None:
        import time

        import mlflow
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        run = mlflow.last_active_run()  # the one MLflowCallback started in this process
        if run is None:  # training never started: nothing was logged
            return
        step = int(summary.get("global_step") or 0)
        now = int(time.time() * 1000)
        client = MlflowClient()
        found = [Metric(k, v, now, step) for k, v in summary_metrics(summary).items()]
        for start in range(0, len(found), 1000):  # MLflow's batch limit
            client.log_batch(run.info.run_id, metrics=found[start : start + 1000])
        client.set_tag(run.info.run_id, "status", summary.get("status", "unknown"))


def load_runs(experiment: str, group: str | None = None) -> list[Run]:
    """Runs of an MLflow experiment at MLFLOW_TRACKING_URI (logger=mlflow): each run's latest metrics, the summary
    the run added at its end (plan/*, memory/peak/*, ...), its status and swept values from its tags."""
    import json

    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"no MLflow experiment {experiment!r} at {client.tracking_uri}")
    out = []
    for r in client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"]):
        overrides = json.loads(r.data.tags.get("overrides", "[]"))
        summary = {**r.data.metrics, "status": r.data.tags.get("status", r.info.status.lower())}
        out.append(Run(r.info.run_name, values(overrides), summary))
    return out
