"""`grpo-exp calibrate`: correction factors for the planner, fitted from measured runs.

    grpo-exp calibrate outputs/batch_x_generations/multirun_...     # or several run dirs
    python -m grpo_exp model=qwen7b topology=1x8 preflight.calibration=calibration.json

Each run dir holds its frozen config.yaml and, in summary.json, the peak memory measured per phase
(on a GPU the allocator's reserved peak, on CPU the host RSS). The run's config is planned again, without
calibration and through the driver's own path (job.verdict), split into the groups calibration.py fits, and the
file is written (calibration.py owns its format, the fit and how the planner applies it).
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_exp import GIB
from grpo_exp.config.model_schema import ModelConfig
from grpo_exp.core import gpus, metrics, rundir
from grpo_exp.core.records import Status
from grpo_exp.launching import job
from grpo_exp.planning import cuda_runtime, inputs, memory, plan_file, vllm_engine
from grpo_exp.planning.calibration import ENGINE, HOST, RUNTIME, fit, fit_ratio, predict, runtime_for


def measured_train_gib(summary: Mapping[str, Any]) -> tuple[str, float] | None:
    """The train phase's measured peak (rundir.measured_peak: the same stat every report shows)."""
    found = rundir.measured_peak(summary, phase="train")
    return found if found and found[1] else None


def sample(run_dir: Path) -> dict | None:
    """One measured run as a fit sample: its train-phase peak and what the uncalibrated planner
    puts in that phase, per group (GiB). None for a run that did not complete or measured no train phase."""
    from omegaconf import DictConfig, OmegaConf

    summary = rundir.read_summary(run_dir)
    if summary.get("status") != Status.COMPLETED:  # an OOM's peak is the card's limit, not what the run needed
        return None
    measured = measured_train_gib(summary)
    config = Path(run_dir) / rundir.CONFIG
    if measured is None or not config.exists():
        return None
    cfg = OmegaConf.load(config)
    assert isinstance(cfg, DictConfig), f"{config} is a mapping"
    # a run frozen before a model field existed (the families' numbers) reads that field's default
    cfg.model = OmegaConf.merge(OmegaConf.structured(ModelConfig), cfg.model)
    cfg.preflight.calibration = None  # the planner's own figures: factors are fitted against them
    ran = plan_file.read(run_dir)  # the card it ran on, planned again as that card
    cards = [gpus.Card(ran["gpu_name"], ran["gpu_memory_gib"])] if ran.get("gpu_name") else []
    plan, _, _ = job.verdict(cfg, ran.get("gpus_per_node") or 0, config_path=config, frozen=True, cards=cards)
    assert plan is not None  # a frozen config is planned as it is: never refused
    x = inputs.inputs(cfg, plan)
    parts = memory.train_phase_parts(x)
    return {
        "run": str(run_dir),
        "stat": measured[0],
        "measured": measured[1],
        "device": plan.device,
        **{k: v / GIB for k, v in parts.items()},
        **({"engine": engine_sample(summary, x)} if x.vllm_mode != "off" else {}),
        **({"host": host_sample(summary), "cuda_runtime": runtime_sample(summary, x)} if plan.device == "cuda" else {}),
    }


def runtime_sample(summary: Mapping[str, Any], x) -> dict | None:
    """The card's CUDA runtime: measured (NVML's device memory at the train peak less the allocator's reserve, less
    the planned process-group share) and planned (cuda_runtime.card_part), GiB; None without NVML's figure."""
    used, reserved = (summary.get(metrics.peak("train", stat)) for stat in ("device_used_max", "reserved_max"))
    if not used or not reserved or not x.card:
        return None
    logged = used - reserved - memory.process_group_bytes(x) / GIB
    return {"card": x.card, "logged": logged, "planned": cuda_runtime.card_part(x.card, x.cuda_lazy) / GIB}


def host_sample(summary: Mapping[str, Any]) -> dict | None:
    """A GPU node's processes in host RAM: measured (the fullest node's RSS less the planned offloaded and loaded
    terms) and planned (host_memory.py's runtime); None without both figures."""

    node_rss = summary.get(metrics.peak("train", metrics.NODE_RSS))
    planned, runtime = summary.get(metrics.plan_peak("host")), summary.get(metrics.plan_component("host", "runtime"))
    if node_rss is None or not planned or not runtime:
        return None
    return {"logged": node_rss - (planned - runtime), "planned": runtime}


def engine_sample(summary: Mapping[str, Any], x) -> dict | None:
    """What the engine's budget holds besides weights and KV cache: as vLLM logged it (the budget less its own
    weights and KV cache) and as the uncalibrated planner has it; None when vLLM logged neither figure."""

    weights, kv = (summary.get(metrics.vllm_startup(f"{p}_gib")) for p in ("weights", "kv_cache"))
    if weights is None or kv is None:
        return None
    engine = vllm_engine.estimate(x, server=x.vllm_mode == "server")
    c = engine.components
    return {
        "logged": engine.budget / GIB - weights - kv,
        "planned": (engine.budget - c["weights"] - c["kv_cache"]) / GIB,
    }


def card_runtimes(samples: list[dict]) -> dict[str, float]:
    """Each card's measured CUDA runtime (GiB): the median over its runs."""
    import statistics

    by_card: dict[str, list[float]] = {}
    for s in samples:
        if s.get("cuda_runtime"):
            by_card.setdefault(s["cuda_runtime"]["card"], []).append(s["cuda_runtime"]["logged"])
    return {card: statistics.median(logged) for card, logged in by_card.items()}


def with_measured_runtime(s: dict, runtimes: Mapping[str, float]) -> dict:
    """A sample as the planner plans it with a calibration file's measured runtimes (calibration.runtime_for): its
    card's measured runtime in place of the planned card part."""
    r = s.get("cuda_runtime")
    measured = runtime_for(runtimes, r["card"]) if r else None
    return s if r is None or measured is None else {**s, "states": s["states"] + measured - r["planned"]}


def run_dirs(sources: list[str]) -> list[Path]:
    return [run_dir.resolve() for source in sources for run_dir in rundir.run_dirs(Path(source))]


def calibrate(sources: list[str], out: Path) -> dict:
    samples = [s for s in map(sample, run_dirs(sources)) if s is not None]
    if len(samples) < 2:
        raise ValueError(
            f"{len(samples)} measured run(s) under {', '.join(sources)}: calibration needs at least two (a sweep "
            "over batch size or completion length)"
        )
    devices = {s["device"] for s in samples}
    if len(devices) > 1:
        raise ValueError(
            f"runs from different devices ({', '.join(sorted(devices))}): calibrate each kind of device on its own"
        )
    before = {s["run"]: predict(s, {}) for s in samples}
    runtimes = card_runtimes(samples)
    samples = [with_measured_runtime(s, runtimes) for s in samples]  # as the planner will see them
    factors = fit(samples)
    for name, key in ((ENGINE, "engine"), (HOST, "host")):
        factor = fit_ratio([s[key] for s in samples if s.get(key)])
        if factor is not None:
            factors[name] = factor

    def error(predicted, s):
        return 100 * (predicted - s["measured"]) / s["measured"]

    result = {
        "factors": factors,
        "device": samples[0]["device"],
        "stat": samples[0]["stat"],
        "runs": [
            {
                "run": s["run"],
                "measured_gib": s["measured"],
                "error_before_pct": error(before[s["run"]], s),
                "error_after_pct": error(predict(s, factors), s),
            }
            for s in samples
        ],
        **({RUNTIME: runtimes} if runtimes else {}),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="grpo-exp calibrate",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sources", nargs="+", help="run dirs, or sweep dirs holding them")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("calibration.json"),
        help="where the factors go (preflight.calibration=<this file>)",
    )
    args = parser.parse_args(argv)
    try:
        result = calibrate(args.sources, args.out)
    except (ValueError, OSError) as exc:
        print(f"grpo-exp calibrate: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(result['runs'])} runs ({result['device']}, {result['stat']}): factors "
        + ", ".join(f"{k} {v:.2f}" for k, v in result["factors"].items())
    )
    for card, gib in result.get(RUNTIME, {}).items():
        print(f"  CUDA runtime on {card}: {gib:.2f} GiB per process as measured (the plans for it take this figure)")
    for r in result["runs"]:
        print(
            f"  {Path(r['run']).name}: measured {r['measured_gib']:.2f} GiB, planner error "
            f"{r['error_before_pct']:+.1f}% -> {r['error_after_pct']:+.1f}%"
        )
    print(f"written to {args.out}; use it with preflight.calibration={args.out}")
    return 0
