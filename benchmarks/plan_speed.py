"""Wall time of `python -m grpo_exp ... action=plan`, whole process, for a 2-node and a 512-node cluster
(the planning path must stay free of torch/transformers/trl/deepspeed: under 1 s and 2 s on 2 cores).

    python benchmarks/plan_speed.py --runs 7
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "2x8": ["model=qwen7b", "topology=2x8", "vllm=server", "action=plan"],
    "512 nodes": [
        "model=qwen72b",
        "topology=4x8",
        "topology.nnodes=512",
        "data.num_samples=8192",  # one generation batch takes 4095 distinct prompts
        "deepspeed=zero3",
        "vllm=server",
        "action=plan",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, command in COMMANDS.items():
            times, printed = [], 0
            for i in range(args.runs):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "grpo_exp", *command, f"hydra.run.dir={tmp}/{name}{i}"],
                    check=True,
                    capture_output=True,
                )
                times.append(time.perf_counter() - started)
                printed = len(done.stdout) + len(done.stderr)
            print(
                f"{name} ({' '.join(command)}): median {statistics.median(times):.3f} s, min {min(times):.3f} s, "
                f"max {max(times):.3f} s over {args.runs} runs; {printed / 1024:.1f} KB printed"
            )


if __name__ == "__main__":
    main()
