"""The waits of issue 52, each in seconds and as a ratio to one `from trl import GRPOTrainer` on this machine (the unit
every budget is written in: machines differ ~3x), timed in the same run:

    python benchmarks/suite_speed.py                 # import, the plan, make test-fast, make test
    python benchmarks/suite_speed.py --lanes         # + make test-two-nodes and make test-vllm (their cluster, venv)
    python benchmarks/suite_speed.py --ci            # + the whole .ci/run (its cluster and venvs set up inside)
    python benchmarks/suite_speed.py --only test-fast

Run it from a fresh clone with its venvs set up (`make setup`; `make .venv-vllm/.installed` for the vLLM lane):
set-up is not timed, except inside `.ci/run`. Budgets: the plan 0.05x, test-fast 8x, make test 100x, .ci/run 250x.
One thing at a time: the suites spread over every core, and two at once would time each other.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAN = ["-m", "grpo_exp", "model=qwen7b", "topology=2x8", "vllm=server", "action=plan"]
# name -> (command, budget as a ratio to the import, or None)
WAITS = {
    "test-fast": (["make", "-s", "test-fast"], 8.0),
    "make test": (["make", "-s", "test"], 100.0),
}
LANES = {
    "test-two-nodes": (["make", "-s", "test-two-nodes"], None),
    "test-vllm": (["make", "-s", "test-vllm"], None),
}
CI = {".ci/run": (["bash", ".ci/run"], 250.0)}


def seconds(command: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", action="store_true", help="also the two-node and vLLM lanes")
    parser.add_argument("--ci", action="store_true", help="also the whole .ci/run")
    parser.add_argument("--only", help="one of: plan, " + ", ".join([*WAITS, *LANES, *CI]))
    args = parser.parse_args()
    python = str(ROOT / ".venv" / "bin" / "python")
    unit = min(seconds([python, "-c", "from trl import GRPOTrainer"])[0] for _ in range(3))
    print(f"{'import':<16} {unit:8.1f} s   1x (from trl import GRPOTrainer, min of 3)")
    waits = {**WAITS, **(LANES if args.lanes else {}), **(CI if args.ci else {})}
    if args.only:
        waits = {k: v for k, v in {**WAITS, **LANES, **CI}.items() if k == args.only}
    if not args.only or args.only == "plan":
        plan = sorted(seconds([python, *PLAN, f"hydra.run.dir=/tmp/suite_speed_plan{i}_{time.time_ns()}"])[0]
                      for i in range(5))[2]  # fmt: skip
        print(f"{'plan':<16} {plan:8.2f} s   {plan / unit:.3f}x (budget 0.05x; median of 5)")
    failed = False
    for name, (command, budget) in waits.items():
        took, code = seconds(command)
        within = "" if budget is None else f" (budget {budget:g}x{'' if took / unit <= budget else ': OVER'})"
        print(f"{name:<16} {took:8.0f} s   {took / unit:.1f}x{within}" + (f"  FAILED (exit {code})" if code else ""))
        failed |= bool(code)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
