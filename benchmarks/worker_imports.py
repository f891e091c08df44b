"""What a worker's imports cost with the libraries its run never calls hidden (training/build.py,
hide_unused_libraries) against hiding bitsandbytes only (what workers did before): a fresh process imports the
measured trainer, trl, transformers and datasets, as a worker does before it builds anything.

Paired: each round runs both, in alternating order; prints each side's median CPU seconds (user + system of the
child: the suite is CPU-bound on 2 cores) and the median of the per-round ratios.

    python benchmarks/worker_imports.py --runs 5 [grpo_exp overrides for the run, e.g. logger=none]
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
import grpo_exp.training.measured_trainer
import datasets, transformers, trl
"""


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
    parser.add_argument("overrides", nargs="*", help="the run's grpo_exp overrides (default: the default run)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))
    from hydra import compose, initialize_config_dir

    from grpo_exp import CONF_DIR
    from grpo_exp.config.schema import register_configs
    from grpo_exp.training.build import unused_libraries

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=args.overrides)
    sides = {"bitsandbytes only": ["bitsandbytes"], "all unused": unused_libraries(cfg)}
    print(f"hidden for this run: {', '.join(sides['all unused'])}")
    times: dict[str, list[float]] = {name: [] for name in sides}
    ratios = []
    for i in range(args.runs):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            times[name].append(cpu_seconds(sides[name]))
        ratios.append(times["all unused"][-1] / times["bitsandbytes only"][-1])
    for name, found in times.items():
        print(f"{name:>18}: median {statistics.median(found):.2f} s CPU  ({', '.join(f'{t:.2f}' for t in found)})")
    print(f"median ratio (all unused / bitsandbytes only): {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
