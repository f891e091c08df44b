"""Overhead of memory telemetry: the same tiny GRPO run with memory.telemetry on and off.

Paired design: each pair runs both settings back to back (order alternating, to cancel drift),
and the per-pair ratio of seconds per step (Trainer's train_runtime / steps, which covers the
phase probes and the per-log cross-rank gather) is taken; the median ratio is the result.
On a shared 2-core machine one pair varies by +-15%, so the script also prints the telemetry's
self-timed cost (summary.json telemetry/overhead_share: rank 0's time inside probes and the
gather over train_runtime), which has no such noise.

    python benchmarks/telemetry_overhead.py --pairs 5 --steps 12
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(telemetry: bool, steps: int, procs: int, out: Path) -> dict:
    run_dir = out / f"{'on' if telemetry else 'off'}-{len(list(out.iterdir()))}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_exp",
            "logger=none",
            f"topology.cpu_procs={procs}",
            f"trainer.max_steps={steps}",
            f"memory.telemetry={str(telemetry).lower()}",
            f"hydra.run.dir={run_dir}",
        ],
        check=True,
        capture_output=True,
    )
    return json.loads((run_dir / "summary.json").read_text())


def per_step(summary: dict) -> float:
    return summary["train_runtime_s"] / summary["global_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--procs", type=int, default=2, help="CPU training processes (2 = real DDP, with the gather)")
    args = parser.parse_args()
    ratios, shares = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for pair in range(args.pairs):
            order = (True, False) if pair % 2 == 0 else (False, True)
            runs = {t: run(t, args.steps, args.procs, out) for t in order}
            ratios.append(per_step(runs[True]) / per_step(runs[False]))
            shares.append(runs[True]["telemetry/overhead_share"])
            print(
                f"pair {pair}: on {per_step(runs[True]) * 1000:.1f} ms/step, "
                f"off {per_step(runs[False]) * 1000:.1f} ms/step, "
                f"ratio {ratios[-1]:.4f}; self-timed {shares[-1] * 100:.2f}%"
            )
    median = statistics.median(ratios)
    print(f"median ratio on/off over {args.pairs} pairs: {median:.4f} ({(median - 1) * 100:+.2f}% step time)")
    print(f"median self-timed telemetry share of train time: {statistics.median(shares) * 100:.2f}%")


if __name__ == "__main__":
    main()
