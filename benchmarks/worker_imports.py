"""What a worker's imports cost, and what hiding the libraries its run never calls saved when workers did that
(`sys.modules[name] = None` for bitsandbytes, peft, deepspeed and the unused trackers; removed: user code in a
worker imports what it likes, tests/user_code.py). A fresh process imports the measured trainer, trl, transformers
and datasets, as a worker does before it builds anything.

Paired: each round runs both sides, in alternating order; prints each side's median CPU seconds (user + system of
the child: the suite is CPU-bound on 2 cores) and the median of the per-round ratios.

    python benchmarks/worker_imports.py --runs 5
"""

import argparse
import os
import statistics
import subprocess
import sys

CHILD = """
import sys
for name in filter(None, sys.argv[1].split(",")):
    sys.modules[name] = None
import grpo_exp.training.measured_trainer
import datasets, transformers, trl
"""
# What the default run (logger=wandb, no adapters, no ZeRO, no quantization) used to hide.
ONCE_HIDDEN = ["bitsandbytes", "peft", "deepspeed", "mlflow", "trackio", "swanlab"]


def cpu_seconds(hidden: list[str]) -> float:
    before = os.times()
    done = subprocess.run([sys.executable, "-c", CHILD, ",".join(hidden)], capture_output=True, text=True)
    after = os.times()
    if done.returncode != 0:
        sys.exit(f"the import failed with {hidden}:\n{done.stderr[-3000:]}")
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sides = {"nothing hidden": [], "once hidden": ONCE_HIDDEN}
    times: dict[str, list[float]] = {name: [] for name in sides}
    ratios = []
    for i in range(args.runs):
        for name in list(sides) if i % 2 == 0 else list(reversed(sides)):
            times[name].append(cpu_seconds(sides[name]))
        ratios.append(times["nothing hidden"][-1] / times["once hidden"][-1])
    for name, found in times.items():
        print(f"{name:>15}: median {statistics.median(found):.2f} s CPU  ({', '.join(f'{t:.2f}' for t in found)})")
    print(f"median ratio (nothing hidden / once hidden): {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
