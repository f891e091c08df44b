"""Start-up cost of a grpo_exp run: the same tiny GRPO run as a plain TRL script (benchmarks/plain_trl.py:
one process, no driver, report_to none, no checkpoint) against

    python -m grpo_exp topology.cpu_procs=1 trainer.max_steps=20

Paired: each round runs both, in alternating order; prints each side's median wall time and the median
of the per-round ratios (issue 21's goal: <= 1.10x). Both sides train the same model (the tiny model's
cache dir), prompts, rewards and GRPOConfig: the spec the plain script reads is made from grpo_exp's
own composed config.

    python benchmarks/startup.py --runs 5 [--steps 20] [extra grpo_exp overrides ...]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def plain_spec(overrides: list[str], out: Path) -> dict:
    """What the plain script needs, from the config grpo_exp composes for the same overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from grpo_exp import CONF_DIR
    from grpo_exp.config.registry import register_configs
    from grpo_exp.training.build import model_path

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    assert cfg.data.name == "toy_math" and cfg.vllm.mode == "off" and not cfg.peft.enabled, (
        "plain_trl.py: toy_math only"
    )
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer = {k: v for k, v in trainer.items() if v is not None}  # unset alias fields
    trainer["model_init_kwargs"] = {**(trainer.get("model_init_kwargs") or {}), "dtype": cfg.model.dtype}
    trainer["save_strategy"] = "no"  # a plain script saves no checkpoint
    return {
        "model": model_path(cfg),  # builds the tiny model into the cache on first use
        "grpo_config": {**trainer, "seed": cfg.seed},
        "num_samples": cfg.data.num_samples,
        "seed": cfg.seed,
        "system_prompt": cfg.data.system_prompt,
        "output_dir": str(out),
    }


def timed(command: list[str], env: dict) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("overrides", nargs="*", help="more grpo_exp overrides, applied to both sides")
    args = parser.parse_args()
    overrides = ["topology.cpu_procs=1", f"trainer.max_steps={args.steps}", *args.overrides]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "GRPO_EXP_CACHE": os.environ.get("GRPO_EXP_CACHE", str(tmp / "cache"))}
        env.update(WANDB_SILENT="true", PYTHONPATH=str(HERE.parent))
        os.environ.update(GRPO_EXP_CACHE=env["GRPO_EXP_CACHE"])
        spec = tmp / "spec.json"
        spec.write_text(json.dumps(plain_spec(overrides, tmp / "plain_out")))
        plain, ours = [], []  # (wall s, of which trainer.train() s), per round
        for i in range(args.runs):
            for side in ("plain", "ours") if i % 2 == 0 else ("ours", "plain"):
                if side == "plain":
                    wall, out = timed([sys.executable, str(HERE / "plain_trl.py"), str(spec)], env)
                    plain.append((wall, json.loads(out.strip().splitlines()[-1])["train_runtime_s"]))
                else:
                    run_dir = tmp / f"run{i}"
                    wall, _ = timed([sys.executable, "-m", "grpo_exp", *overrides, f"hydra.run.dir={run_dir}"], env)
                    ours.append((wall, json.loads((run_dir / "summary.json").read_text())["train_runtime_s"]))
            print(
                f"round {i + 1}: plain TRL {plain[-1][0]:.2f} s (in trainer.train() {plain[-1][1]:.2f} s), "
                f"grpo_exp {ours[-1][0]:.2f} s (in trainer.train() {ours[-1][1]:.2f} s): "
                f"{ours[-1][0] / plain[-1][0]:.2f}x"
            )
    ratios = [o[0] / p[0] for o, p in zip(ours, plain, strict=True)]
    outside = [(o[0] - o[1]) - (p[0] - p[1]) for o, p in zip(ours, plain, strict=True)]
    print(
        f"plain TRL median {statistics.median(w for w, _ in plain):.2f} s, grpo_exp median "
        f"{statistics.median(w for w, _ in ours):.2f} s; median paired ratio {statistics.median(ratios):.2f}x over "
        f"{args.runs} rounds ({' '.join(overrides)}); time outside trainer.train(), grpo_exp minus plain: median "
        f"{statistics.median(outside):+.2f} s"
    )


if __name__ == "__main__":
    main()
