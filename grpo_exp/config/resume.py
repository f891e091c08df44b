"""`python -m grpo_exp resume=<run dir>`: continue a run with its own frozen config.yaml.

The run's config is what it was: only overrides that do not change what the run computes are
taken (how long it trains, how often it logs and saves, watchdogs, where its processes start).
Anything else - model, data, batch sizes, topology, learning rate, ... - would make the continued
run a different experiment, and is refused naming the keys. The workers then continue from the
latest checkpoint in the run dir (worker.py), so a resume and a SLURM requeue are the same thing.
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import Problem
from grpo_exp.config.overrides import values
from grpo_exp.config.schema import Config
from grpo_exp.core import rundir

# Keys (or key prefixes, ending in ".") a resumed run may change.
RESUMABLE = (
    "resume",
    "action",
    "trainer.max_steps",
    "trainer.num_train_epochs",
    "trainer.logging_steps",
    "trainer.logging_first_step",
    "trainer.save_strategy",
    "trainer.save_steps",
    "trainer.save_total_limit",
    "trainer.save_only_model",
    "trainer.log_completions",
    "trainer.num_completions_to_print",
    "trainer.disable_tqdm",
    "watchdog.",
    "preemption.",
    "memory.telemetry",
    "logger.",
    "launcher",
    "launcher.",
    "preflight.",
    "topology.node_rank",
    "topology.master_addr",
    "topology.master_port",
    "topology.rendezvous_timeout_s",
    "topology.collective_timeout_s",
    "vllm.server_timeout",
)


def _resumable(key: str) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in RESUMABLE)


def load(composed: DictConfig, overrides: list[str]) -> tuple[DictConfig | None, list[Problem]]:
    """The frozen config of the run dir `composed.resume`, with the command line's resumable
    overrides applied (their values taken from `composed`, where Hydra parsed and typed them)."""
    run_dir = Path(composed.resume).expanduser()
    if not (run_dir / rundir.CONFIG).is_file():
        return None, [
            Problem(
                "resume",
                f"{run_dir} holds no {rundir.CONFIG}: not a grpo_exp run dir",
                "point resume= at the run dir of the run to continue",
            )
        ]
    changed = [key for key in values(overrides) if not _resumable(key)]
    if changed:
        return None, [
            Problem(
                key,
                "would change the run's shape; a resumed run keeps its frozen config.yaml",
                "drop it to continue the run as it was, or start a new run with it (resumable: max_steps, logging, "
                "saving, watchdog, launcher, ...)",
            )
            for key in changed
        ]
    cfg = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(run_dir / rundir.CONFIG))
    assert isinstance(cfg, DictConfig)  # the schema is a mapping: so is what merges into it
    for key in values(overrides):
        OmegaConf.update(cfg, key, OmegaConf.select(composed, key), merge=False)
    cfg.resume = str(run_dir)
    return cfg, []
