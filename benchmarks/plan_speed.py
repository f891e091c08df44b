"""Wall time of `python -m grpo_exp model=qwen7b topology=2x8 action=plan` (the planning path must
stay free of torch/transformers/trl and finish in under 2 s on 2 cores).

    python benchmarks/plan_speed.py --runs 7
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

COMMAND = ["model=qwen7b", "topology=2x8", "vllm=server", "action=plan"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "grpo_exp", *COMMAND, f"hydra.run.dir={tmp}/{i}"],
                check=True,
                capture_output=True,
            )
            times.append(time.perf_counter() - started)
    print(
        f"action=plan ({' '.join(COMMAND)}): median {statistics.median(times):.3f} s, "
        f"min {min(times):.3f} s, max {max(times):.3f} s over {args.runs} runs (budget 2 s)"
    )


if __name__ == "__main__":
    main()
