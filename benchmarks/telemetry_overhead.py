"""Overhead of memory telemetry: the same tiny GRPO run with memory.telemetry on and off.

Paired design: each pair runs both settings back to back (order alternating, to cancel drift),
and the per-pair ratio of seconds per step (Trainer's train_runtime / steps, which covers the
phase probes and the per-log cross-rank gather) is taken; the median ratio is the result.

    python benchmarks/telemetry_overhead.py --pairs 5 --steps 12
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def seconds_per_step(telemetry: bool, steps: int, procs: int, out: Path) -> float:
    run_dir = out / f"{'on' if telemetry else 'off'}-{len(list(out.iterdir()))}"
    subprocess.run(
        [sys.executable, "-m", "grpo_exp", "logger=none", f"topology.cpu_procs={procs}",
         f"trainer.max_steps={steps}", f"memory.telemetry={str(telemetry).lower()}", f"hydra.run.dir={run_dir}"],
        check=True, capture_output=True,
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary["train_runtime_s"] / summary["global_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--procs", type=int, default=2, help="CPU training processes (2 = real DDP, with the gather)")
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for pair in range(args.pairs):
            order = (True, False) if pair % 2 == 0 else (False, True)
            times = {t: seconds_per_step(t, args.steps, args.procs, out) for t in order}
            ratios.append(times[True] / times[False])
            print(f"pair {pair}: on {times[True] * 1000:.1f} ms/step, off {times[False] * 1000:.1f} ms/step, ratio {ratios[-1]:.4f}")
    median = statistics.median(ratios)
    print(f"median ratio on/off over {args.pairs} pairs: {median:.4f} ({(median - 1) * 100:+.2f}% step time)")


if __name__ == "__main__":
    main()
