"""What the garbage collector costs while modules load, and what loading them with it paused saves
(grpo_exp.imports_frozen: paused, then what was made frozen). Three starts, each in a fresh process:

  worker   a training process's imports: the measured trainer, trl, transformers, datasets (worker.py)
  command  `import grpo_exp.__main__`: Hydra, OmegaConf, the schema and the driver's modules
  plan     the whole `python -m grpo_exp model=qwen7b topology=2x8 vllm=server action=plan`

Each side of a pair is the same start, with the collector running throughout ("collecting": imports_frozen replaced
by a context that does nothing) or as grpo_exp runs it ("paused"). Each round runs both sides in alternating order;
prints each side's median wall and CPU seconds (user + system of the child) and the median of the rounds' ratios.

    python benchmarks/imports_frozen.py --runs 5
    python benchmarks/imports_frozen.py --runs 9 --only plan,command
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

# `collecting`: grpo_exp.imports_frozen made a no-op before anything imports it
CHILD = """
import contextlib, runpy, sys
import grpo_exp
if sys.argv[1] == "collecting":
    grpo_exp.imports_frozen = contextlib.nullcontext
start = sys.argv[2]
if start == "worker":
    with grpo_exp.imports_frozen():
        import grpo_exp.training.measured_trainer
        import datasets, transformers, trl
elif start == "command":
    import grpo_exp.__main__
else:
    sys.argv = ["grpo_exp", "model=qwen7b", "topology=2x8", "vllm=server", "action=plan", f"hydra.run.dir={start}"]
    try:
        runpy.run_module("grpo_exp", run_name="__main__")
    except SystemExit as ended:
        sys.exit(ended.code)
"""
STARTS = ("worker", "command", "plan")


def timed(side: str, start: str, tmp: str, i: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process."""
    argument = f"{tmp}/plan-{side}-{i}" if start == "plan" else start
    before, started = os.times(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, side, argument], capture_output=True, text=True)
    wall, after = time.perf_counter() - started, os.times()
    if done.returncode != 0:
        sys.exit(f"{start} ({side}) failed:\n{done.stderr[-3000:]}")
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=",".join(STARTS), help="a comma-separated subset of: " + ", ".join(STARTS))
    args = parser.parse_args()
    sides = ("collecting", "paused")
    with tempfile.TemporaryDirectory() as tmp:
        for start in args.only.split(","):
            timed("paused", start, tmp, -1)  # the first start reads cold files
            found: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
            for i in range(args.runs):
                for side in sides if i % 2 == 0 else sides[::-1]:
                    found[side].append(timed(side, start, tmp, i))
            for side in sides:
                wall, cpu = (statistics.median(t[k] for t in found[side]) for k in (0, 1))
                print(f"{start:>8} {side:>10}: median {wall:.3f} s wall, {cpu:.3f} s CPU")
            pairs = list(zip(found["paused"], found["collecting"], strict=True))
            wall_ratio = statistics.median(p[0] / c[0] for p, c in pairs)
            cpu_ratio = statistics.median(p[1] / c[1] for p, c in pairs)
            ratios = f"{wall_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU (median of {args.runs})"
            print(f"{start:>8} paused / collecting: {ratios}")


if __name__ == "__main__":
    main()
