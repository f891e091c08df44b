"""The run dir: the one place a run's files are named, written and read.

    config.yaml     the resolved config, frozen by the driver; every process reads this file
    plan.json       the launch plan: per node processes, GPUs, environment, commands
    train.log       what every process printed
    metrics.jsonl   one JSON object per logged step, flushed as written
    summary.json    status, exit_code, wall_s, final metrics (the driver writes the final status)
    ranks/          rank<N>.json: how each rank ended, in its own words (outcome.py)
    checkpoints/    checkpoint-<step>/ as transformers writes them; a run resumes from the latest

Pure Python (json, yaml, omegaconf): the driver uses it without importing torch.
"""

import functools
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf

from grpo_exp import PHASES
from grpo_exp.core import metrics
from grpo_exp.core.records import RankRecord, Status, Summary

CONFIG = "config.yaml"
PLAN = "plan.json"
LOG = "train.log"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"

CHECKPOINTS = "checkpoints"  # GRPOConfig.output_dir: transformers writes checkpoint-<step>/ here
NODES = "nodes"  # nodes/<N>/: node N's config.yaml, plan.json, train.log, summary.json, .hydra/
RANKS = "ranks"  # ranks/rank<N>.json: how a rank ended (rank 0 always, the others when they did not complete);
# ranks/rank<N>.phase: the phase it last entered (launching/oom_killer.py reads it for a rank SIGKILL took)
STACKS = "stacks"  # stacks/rank<N>.txt: Python stacks a stalled rank dumped (the watchdog)
SLURM = "slurm"  # submitit's job scripts and logs
WEIGHT_SYNC = "weight_sync"  # vllm.weight_sync=filesystem: the policy's latest weights, which the server reloads


def freeze_config(cfg: DictConfig, run_dir: Path) -> Path:
    """Write the fully resolved config; from here on nobody re-resolves it (no per-rank ${now:})."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CONFIG
    path.write_text(config_text(cfg))
    return path


def config_text(cfg: DictConfig) -> str:
    """config.yaml as every process reads it (launcher=kubernetes puts the same text in a ConfigMap): the text of
    OmegaConf.to_yaml(cfg, resolve=True), emitted by libyaml where PyYAML has it, ~4x faster than PyYAML's emitter
    (tests/core/test_rundir.py holds the two texts equal)."""
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return yaml.dump(plain, Dumper=_config_dumper(), default_flow_style=False, allow_unicode=True, sort_keys=False)


@functools.cache
def _config_dumper() -> Any:
    """libyaml's safe dumper (PyYAML's own where it was built without libyaml) writing strings by OmegaConf's rule:
    quoted where they would read back as a bool or a number ('1e-05', 'true')."""
    from omegaconf._utils import get_omega_conf_dumper  # OmegaConf's own dumper, whose string rule to_yaml applies

    dumper: Any = type("ConfigDumper", (getattr(yaml, "CSafeDumper", yaml.SafeDumper),), {})
    dumper.add_representer(str, get_omega_conf_dumper().yaml_representers[str])
    return dumper


def load_config(path: str | Path) -> DictConfig:
    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig), f"{path}: a config is a mapping"
    OmegaConf.set_readonly(cfg, True)  # a worker that edits its config would drift from the other ranks
    return cfg


def _jsonable(value):
    """Plain JSON: tensors/numpy scalars become floats, NaN/inf become null (JSON has neither)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class MetricsWriter:
    """Appends one line per logged step and flushes it, so a crash loses nothing already logged."""

    def __init__(self, run_dir: Path):
        self._file = open(run_dir / METRICS, "a", buffering=1)

    def write(self, step: int, metrics: dict) -> None:
        self._file.write(json.dumps({"step": step, **_jsonable(metrics)}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_summary(run_dir: Path, **fields) -> Summary:
    """Merge `fields` into summary.json (atomic replace: readers never see half a file). Statuses
    are written through outcome.write_status, which adds the exit code. Its keys are Summary's fields and the
    measurements' metric names (memory/peak*, plan/*, vllm/*): a TypedDict cannot name the latter, so the file's
    text is typed as the Summary it holds."""
    summary = read_summary(run_dir)
    summary.update(_jsonable(fields))
    tmp = Path(run_dir) / (SUMMARY + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, Path(run_dir) / SUMMARY)
    return cast(Summary, summary)


def read_overrides(run_dir: Path) -> list[str]:
    """The command-line overrides Hydra recorded for this run (.hydra/overrides.yaml)."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    written = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else []  # as written: ${...} unresolved
    return [str(item) for item in written] if isinstance(written, list) else []


# The measured peak of a run, by preference: the GPU caching allocator's reserved bytes, the whole device
# (NVML), the host RSS (CPU runs have only that). Reports, comparisons and calibration all read this.
# The run's peak as what OOMs: NVML's device memory on a GPU (the allocator's reserve, the CUDA context and NCCL's
# buffers all count), the reserve where NVML was not read, a CPU rank's RSS. The plan's total is the same quantity.
MEASURED_PEAK_STATS = ("device_used_max", "reserved_max", "host_rss_max")
PHASE_TENSORS_STAT = "alloc_max"  # a phase on a GPU: the tensors alive, the allocator's sticky reserve left out


def measured_peak(summary: Mapping[str, Any], phase: str | None = None) -> tuple[str, float] | None:
    """(stat, GiB) of the run's measured training peak (in `phase`, if given), or None if nothing was measured."""
    for stat in MEASURED_PEAK_STATS:
        value = summary.get(metrics.peak_phase(phase, stat) if phase else metrics.peak("train", stat))
        if value is not None:
            return stat, value
    return None


def phase_path(run_dir: Path, rank: int) -> Path:
    """The file a rank keeps holding the phase it last entered: what a rank the OOM killer takes was doing."""
    return Path(run_dir) / RANKS / f"rank{rank}.phase"


def read_phase(run_dir: Path, rank: int) -> str | None:
    """The phase rank `rank` was last in (its phase file, padding stripped), or None where it kept none."""
    path = phase_path(run_dir, rank)
    return (path.read_text().strip() or None) if path.exists() else None


def phase_measure(summary: Mapping[str, Any], phase: str) -> tuple[str, float | None, float | None]:
    """(stat, measured GiB, planned GiB) of one phase, like with like: on a GPU the tensors alive (alloc_max) against
    the plan's tensors (the phase less its runtime and allocator_reserve: the caching allocator keeps the largest
    phase's blocks, so a phase's reserve says nothing of the phase); on CPU ranks the RSS against the phase."""
    planned = summary.get(metrics.plan_phase("train", phase))
    measured = summary.get(metrics.peak_phase(phase, PHASE_TENSORS_STAT))
    if measured is not None:
        overhead = sum(summary.get(metrics.plan_component("train", c)) or 0.0 for c in ("runtime", "allocator_reserve"))
        return PHASE_TENSORS_STAT, measured, planned - overhead if planned is not None else None
    found = measured_peak(summary, phase)
    return (found[0], found[1], planned) if found else ("host_rss_max", None, planned)


# What a sweep can optimize by name (config's optimized_metric): the summary key it reads and its direction.
# Any other name is a summary.json key (or one of its final_metrics), maximized unless it is memory.
OPTIMIZED_METRICS = {
    "tokens_per_s": (metrics.TOKENS_PER_S, "maximize"),
    "peak_memory": ("peak_memory", "minimize"),  # the measured peak: NVML on a GPU, RSS on CPU (measured_peak)
    "reward": ("reward", "maximize"),  # the last logged mean reward
}


def optimized(summary: Mapping[str, Any], metric: str) -> float | None:
    """The value of `metric` (optimized_metric) in a run's summary, None where the run has none."""
    key, _ = OPTIMIZED_METRICS.get(metric, (metric, None))
    if key == "peak_memory":
        found = measured_peak(summary)
        return found[1] if found else None
    value = summary.get(key, (summary.get("final_metrics") or {}).get(key))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def direction(metric: str) -> str:
    """maximize or minimize: the named metrics say; a summary key is minimized when it is memory."""
    return (
        OPTIMIZED_METRICS[metric][1]
        if metric in OPTIMIZED_METRICS
        else ("minimize" if metric.startswith(("memory/", "plan/")) else "maximize")
    )


def plan_errors(summary: Mapping[str, Any]) -> dict[str, float]:
    """The planner's error per phase and on the peak, like with like (phase_measure; the peak as measured_peak),
    in percent of the measured value: the keys a tracker and `compare` show."""
    out = {}
    for phase in PHASES:
        _, measured, planned = phase_measure(summary, phase)
        if measured and planned is not None:
            out[metrics.plan_error(phase)] = 100 * (planned - measured) / measured
    found, planned = measured_peak(summary), summary.get(metrics.plan_peak("train"))
    if found and found[1] and planned is not None:
        out[metrics.plan_error("peak")] = 100 * (planned - found[1]) / found[1]
    return out


def run_dirs(path: Path) -> list[Path]:
    """`path` itself if it is a run dir (it has a summary.json), else the run dirs directly below it
    (a multirun's trials), in job order."""
    path = Path(path)
    if (path / SUMMARY).exists():
        return [path]
    found = [d for d in path.iterdir() if (d / SUMMARY).exists()] if path.is_dir() else []
    return sorted(found, key=lambda d: (not d.name.isdigit(), int(d.name) if d.name.isdigit() else 0, d.name))


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(_jsonable(data), indent=2) + "\n")


def read_json(path: Path) -> dict:
    """A JSON file of the run dir, or {} where it is not (yet) written."""
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def read_summary(run_dir: Path) -> Summary:
    return cast(Summary, read_json(Path(run_dir) / SUMMARY))


def write_rank_record(
    run_dir: Path, rank: int, record: RankRecord, measurements: Mapping[str, float] | None = None
) -> None:
    """Each rank records its own end (outcome.py reads them): rank 0 may never hear of a peer's. Rank 0's
    `measurements` (memory/peak*, measured/*, plan/*: named by metric, so no field of RankRecord) go beside it."""
    folder = Path(run_dir) / RANKS
    folder.mkdir(exist_ok=True)
    whole = {"rank": rank, **record, **(measurements or {})}
    (folder / f"rank{rank}.json").write_text(json.dumps(_jsonable(whole), indent=2))


def clear_rank_records(run_dir: Path) -> None:
    """A new attempt (a resume) starts without the last one's records; summary.json kept their story."""
    for path in (Path(run_dir) / RANKS).glob("rank*.json"):
        path.unlink()


def node_subdir(node_rank: int) -> str:
    """Node N > 0 of a multi-node run keeps its files under nodes/<N>/ of the run dir: nodes started
    with one shared run dir never overwrite each other, and node 0's dir leads to all of them."""
    return f"{NODES}/{node_rank}/" if node_rank > 0 else ""


def holds_run(run_dir: Path) -> Summary | None:
    """The summary of the run `run_dir` already holds, or None. A dir holding only a plan
    (action=plan) holds no run yet: running it there is the natural next step."""
    summary = read_summary(run_dir)
    return summary if summary and summary.get("status") != Status.PLANNED else None


def latest_checkpoint(run_dir: Path) -> tuple[Path, int] | None:
    """The newest complete checkpoint (one with trainer_state.json) and its step, or None."""
    found = []
    for path in (Path(run_dir) / CHECKPOINTS).glob("checkpoint-*"):
        step = path.name.removeprefix("checkpoint-")
        if step.isdigit() and (path / "trainer_state.json").is_file():
            found.append((int(step), path))
    if not found:
        return None
    newest, path = max(found)
    return path, newest


def truncate_metrics(run_dir: Path, last_step: int) -> int:
    """Drop metrics.jsonl lines after `last_step` (steps a resumed run will log again); returns how many went."""
    path = Path(run_dir) / METRICS
    if not path.exists():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for line in lines if json.loads(line)["step"] <= last_step]
    if len(kept) < len(lines):
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)
    return len(lines) - len(kept)
