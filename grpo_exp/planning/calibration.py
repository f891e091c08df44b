"""Correction factors for the planner, fitted from measured runs.

    python -m grpo_exp.calibrate outputs/batch_x_generations/multirun_...   # or several run dirs
    python -m grpo_exp model=qwen7b topology=1x8 preflight.calibration=calibration.json

Each run dir holds its frozen config.yaml and, in summary.json, the peak memory measured per phase
(on a GPU the allocator's reserved peak, on CPU the host RSS). The run's config is planned again,
without calibration, and the train phase's measured peak is fitted as

    measured = f_states * (model states + runtime) + f_activations * activations + f_logits * logits

by least squares over the runs (factors kept >= 0.05, the others refitted when one is held there).
Runs across batch sizes and completion
lengths separate the three: states do not change with them, activations grow with batch x
sequence, logits with batch x completion. A factor that the runs cannot separate (the same
batch and lengths everywhere) stays 1.0. The file also records the device and statistic it came
from; the planner uses it only for plans on the same kind of device.

Pure Python apart from numpy's least squares: no torch.
"""

import json
from pathlib import Path

from grpo_exp.core import rundir
from grpo_exp.planning.planner import GROUPS

FLOOR = 0.05  # no component is fitted away entirely


def measured_train_gib(summary: dict) -> tuple[str, float] | None:
    """The train phase's measured peak (rundir.measured_peak: the same stat every report shows)."""
    found = rundir.measured_peak(summary, phase="train")
    return found if found and found[1] else None


def fit(samples: list[dict]) -> dict[str, float]:
    """samples: {'measured': GiB, 'states': GiB, 'activations': GiB, 'logits': GiB, 'other': GiB (not
    corrected: a colocated vLLM engine's share)}. Least squares on the groups that vary across
    samples (the others stay 1.0); a factor that comes out below the floor is held there and the
    rest solved again, so the fit stays a least-squares one."""
    import numpy as np

    factors = {g: 1.0 for g in GROUPS}
    free = [g for g in GROUPS if g == "states" or len({round(s[g], 6) for s in samples}) > 1]
    while free:
        held = [g for g in GROUPS if g not in free]
        a = np.array([[s[g] for g in free] for s in samples])
        b = np.array([s["measured"] - s.get("other", 0.0) - sum(factors[g] * s[g] for g in held) for s in samples])
        solution, *_ = np.linalg.lstsq(a, b, rcond=None)
        low = [g for g, v in zip(free, solution, strict=True) if v < FLOOR]
        if not low:
            factors.update({g: float(v) for g, v in zip(free, solution, strict=True)})
            break
        for g in low:
            factors[g] = FLOOR
            free.remove(g)
    return factors


def predict(sample: dict, factors: dict[str, float]) -> float:
    return sample.get("other", 0.0) + sum(factors.get(g, 1.0) * sample[g] for g in GROUPS)


def sample(run_dir: Path) -> dict | None:
    """One measured run as a fit sample: its train-phase peak and what the uncalibrated planner
    puts in that phase, per group (GiB). None without a measured train phase."""
    from omegaconf import OmegaConf

    from grpo_exp import GIB
    from grpo_exp.core import rundir
    from grpo_exp.planning import planner

    summary = rundir.read_summary(run_dir)
    measured = measured_train_gib(summary)
    config = Path(run_dir) / rundir.CONFIG
    if measured is None or not config.exists():
        return None
    cfg = OmegaConf.load(config)
    cfg.preflight.calibration = None  # the planner's own figures: factors are fitted against them
    plan_json = json.loads((Path(run_dir) / rundir.PLAN).read_text()) if (Path(run_dir) / rundir.PLAN).exists() else {}
    plan, _ = planner.plan_and_estimate(cfg, plan_json.get("gpus_per_node") or 0, str(config))
    parts = planner.train_phase_parts(planner.inputs(cfg, plan))
    return {
        "run": str(run_dir),
        "stat": measured[0],
        "measured": measured[1],
        "device": plan.device,
        **{k: v / GIB for k, v in parts.items()},
    }


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
    factors = fit(samples)

    def error(s, f):
        return 100 * (predict(s, f) - s["measured"]) / s["measured"]

    result = {
        "factors": factors,
        "device": samples[0]["device"],
        "stat": samples[0]["stat"],
        "runs": [
            {
                "run": s["run"],
                "measured_gib": s["measured"],
                "error_before_pct": error(s, {}),
                "error_after_pct": error(s, factors),
            }
            for s in samples
        ],
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m grpo_exp.calibrate",
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
        print(f"grpo_exp.calibrate: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(result['runs'])} runs ({result['device']}, {result['stat']}): factors "
        + ", ".join(f"{k} {v:.2f}" for k, v in result["factors"].items())
    )
    for r in result["runs"]:
        print(
            f"  {Path(r['run']).name}: measured {r['measured_gib']:.2f} GiB, planner error "
            f"{r['error_before_pct']:+.1f}% -> {r['error_after_pct']:+.1f}%"
        )
    print(f"written to {args.out}; use it with preflight.calibration={args.out}")
    return 0
