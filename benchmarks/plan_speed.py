"""Wall time of `python -m grpo_exp ... action=plan`, whole process, paired with an older commit (94b2bb9: the last
plan before the config grew its recipe, trackers and model families) and set against one `from trl import
GRPOTrainer` on this machine, the unit every speed budget is written in (machines differ ~3x). Issue 52's goals:
at most 0.8x of 94b2bb9's plan and 0.05x of the import.

    python benchmarks/plan_speed.py --runs 5                 # 2x8 paired with 94b2bb9, the 512-node plan alone
    python benchmarks/plan_speed.py --against HEAD~3 --runs 9

Each pair runs the two checkouts back to back, in alternating order, with the same interpreter (this venv), the old
one from a `git archive` of its commit, both compiled to bytecode first; the ratio reported is the median of the
pairs' ratios, so a busy moment slows both.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIRED = ["model=qwen7b", "topology=2x8", "vllm=server", "action=plan"]
LARGE = [  # a plan of 512 nodes: the large-cluster path (one generation batch takes 4095 distinct prompts)
    "model=qwen72b",
    "topology=4x8",
    "topology.nnodes=512",
    "data.num_samples=8192",
    "deepspeed=zero3",
    "vllm=server",
    "action=plan",
]


MODULE = ("-m", "grpo_exp")  # how a user starts the plan


def timed(root: Path, command: list[str], run_dir: Path, entry: tuple[str, ...] = MODULE) -> float:
    """One plan from checkout `root`: its own package first on the path, its run dir fresh; `entry`: how Python starts
    it (COMPOSED_ONLY: the same command with a job that does nothing)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *entry, *command, f"hydra.run.dir={run_dir}"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"the plan from {root} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


EMPTY_APP = """import hydra


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    pass


main()
"""


def empty_app_seconds(tmp: Path, runs: int) -> float:
    """The floor any Hydra plan stands on: an @hydra.main app with a one-key config (Python, Hydra's import, its
    compose and run dir), median of `runs`."""
    app = tmp / "empty_app"
    (app / "conf").mkdir(parents=True)
    (app / "conf" / "config.yaml").write_text("a: 1\n")
    (app / "app.py").write_text(EMPTY_APP)
    took = []
    for i in range(runs):
        started = time.perf_counter()
        command = [sys.executable, "app.py", f"hydra.run.dir={app}/run{i}"]
        subprocess.run(command, cwd=app, check=True, capture_output=True)
        took.append(time.perf_counter() - started)
    return statistics.median(took)


# The command with a job that does nothing: every module loaded, our config registered and composed, Hydra's run of
# it (its copies, its .hydra/ record), then no check, no plan, no table. What a plan costs before it plans anything.
COMPOSED_ONLY = """import sys
from grpo_exp.launching import job
from grpo_exp.launching.job import Ended
job.run = lambda spec: Ended(0, None)
from grpo_exp.__main__ import main
sys.argv[0] = "grpo_exp"
main()
"""


def import_seconds(runs: int = 3) -> float:
    """The unit: the fastest of `runs` imports of TRL's trainer in a fresh interpreter."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from trl import GRPOTrainer"], check=True, capture_output=True)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="pairs (and runs of the 512-node plan)")
    parser.add_argument("--against", default="94b2bb9", help="the commit the plan is paired with")
    args = parser.parse_args()
    unit = import_seconds()
    print(f"import: `from trl import GRPOTrainer` {unit:.2f} s (min of 3)")
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        # Both from bytecode, as an installed package runs: where PYTHONDONTWRITEBYTECODE is set (these machines set
        # it) a fresh archive would otherwise compile every module on every run, ~0.2 s the old plan never pays in use
        for root in (ROOT, old):
            compile_all = [sys.executable, "-m", "compileall", "-q", "grpo_exp", "hydra_plugins"]
            subprocess.run(compile_all, cwd=root, check=True)
        timed(ROOT, PAIRED, Path(tmp) / "warm-new")  # the first of each reads cold files
        timed(old, PAIRED, Path(tmp) / "warm-old")
        pairs, floors = [], []
        for i in range(args.runs):  # in alternating order: a machine that speeds up or slows down favours neither
            sides = [("new", ROOT, MODULE), ("old", old, MODULE), ("composed", ROOT, ("-c", COMPOSED_ONLY))]
            took = {
                name: timed(root, PAIRED, Path(tmp) / f"{name}{i}", entry)
                for name, root, entry in sides[:: 1 if i % 2 == 0 else -1]
            }
            pairs.append((took["new"], took["old"]))
            floors.append((took["composed"], took["new"]))  # the plan's floor, paired with it
        new = statistics.median(a for a, _ in pairs)
        ratio = statistics.median(a / b for a, b in pairs)
        print(
            f"plan ({' '.join(PAIRED)}): median {new:.3f} s = {ratio:.2f}x of {args.against} "
            f"(median {statistics.median(b for _, b in pairs):.3f} s; median of {args.runs} paired ratios) "
            f"= {new / unit:.3f}x the import"
        )
        large = [timed(ROOT, LARGE, Path(tmp) / f"large{i}") for i in range(args.runs)]
        print(f"plan of 512 nodes: median {statistics.median(large):.3f} s = {statistics.median(large) / unit:.3f}x")
        floor = empty_app_seconds(Path(tmp), args.runs)
        print(f"an empty @hydra.main app (the floor): median {floor:.3f} s = {floor / unit:.3f}x")
        composed = statistics.median(a for a, _ in floors)
        print(
            f"the plan's command with a job that does nothing (composed, nothing checked, planned or printed): median "
            f"{composed:.3f} s = {composed / unit:.3f}x, "
            f"{statistics.median(a / b for a, b in floors):.2f}x of the plan (paired)"
        )


if __name__ == "__main__":
    main()
