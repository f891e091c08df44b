"""What every tracker writes of a run: its name, group, tags and config (the overrides and the swept values as
top-level keys, which a tracker's panels plot across a sweep's runs), the summary's numbers, and the run id a resumed
run continues."""

import secrets
from pathlib import Path

from omegaconf import DictConfig

from grpo_exp.config.overrides import values
from grpo_exp.core import plain, rundir


def run_tags(cfg: DictConfig) -> list[str]:
    ds = cfg.deepspeed.get("zero_optimization", {}).get("stage") if cfg.deepspeed else None
    derived = [
        f"model:{cfg.model.name}",
        f"topology:{cfg.topology.name}",
        f"deepspeed:{'zero' + str(ds) if ds is not None else 'none'}",
        f"vllm:{cfg.vllm.mode}",
    ] + ([f"fsdp:{cfg.fsdp.name}"] if cfg.fsdp.enabled else [])
    return derived + list(cfg.logger.tags)


def swept_values(overrides: list[str]) -> dict:
    """`key=value` overrides (not hydra.* ones) as {key: value}, values parsed as YAML scalars."""
    import yaml

    return {key: yaml.safe_load(value) for key, value in values(overrides).items()}


def run_group(cfg: DictConfig, run_dir: Path) -> str:
    """logger.group; else runs of one sweep share a group, experiment/<sweep dir name>; a single run: the
    experiment. A tracker's group (MLflow's experiment)."""
    if cfg.logger.group:
        return cfg.logger.group
    multirun = run_dir.parent / "multirun.yaml"
    return f"{cfg.experiment}/{run_dir.parent.name}" if multirun.exists() else cfg.experiment


def run_name(cfg: DictConfig, run_dir: Path) -> str:
    """What every tracker calls the run: run_name, else the run dir's name."""
    return cfg.run_name or run_dir.name


def run_config(cfg: DictConfig, run_dir: Path) -> dict:
    """What a tracker keeps as the run's config: the resolved config, the command line's overrides, and those
    values as top-level keys ("trainer.num_generations": 8) that a tracker's parallel coordinates and scatter
    panels plot directly across the runs of a sweep."""
    overrides = rundir.read_overrides(run_dir)
    config = plain.mapping(cfg)
    config["overrides"] = overrides
    config.update(swept_values(overrides))
    return config


def kept_run_id(id_file: Path) -> str:
    """One tracker run per grpo_exp run: a resumed (or requeued) run continues the tracker's run whose id the
    first start kept in the run dir."""
    run_id = (
        id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
    )  # the run ids trackers take: [a-z0-9]+
    id_file.write_text(run_id + "\n")
    return run_id


def summary_metrics(summary: dict) -> dict[str, float]:
    """The run summary's numbers (plan/*, time/*, memory/peak/*, ...) and the planner's errors like with like
    (plan_error/train/*): what a tracker keeps beside the steps."""
    numbers = {k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**numbers, **rundir.plan_errors(summary)}
