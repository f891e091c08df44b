"""What Hydra must know before it composes a run: the typed schema, the `sweep` group (files in the top-level sweeps/),
and the resolvers the config's interpolations use. __main__ calls it where the command starts (and registers the
frontier sweeper beside it); tests compose after it too."""

import functools
import secrets
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from grpo_exp import SWEEPS_DIR
from grpo_exp.config.schema import Config
from grpo_exp.core.rundir import node_subdir


@functools.cache  # once per process: storing the schema builds its ~500 typed nodes (~50 ms), and the store outlives
# every compose (a recipe's check composes again after the command line's)
def register_configs() -> None:
    """Make `schema`, the `sweep` group (files in top-level sweeps/) and our resolvers known to Hydra."""
    # ${eq:a,b}: lets trainer.bf16 follow model.dtype. Resolved before the config is frozen.
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a) == str(b))
    # ${run_id:}: a short random id, the same for every use in this process (run and sweep dir names).
    if not OmegaConf.has_resolver("run_id"):
        run_id = secrets.token_hex(2)
        OmegaConf.register_new_resolver("run_id", lambda: run_id)
    # ${node_subdir:rank}: where a node's files go inside a shared run dir ("" for node 0).
    if not OmegaConf.has_resolver("node_subdir"):
        OmegaConf.register_new_resolver("node_subdir", lambda rank: node_subdir(int(rank)))
        OmegaConf.register_new_resolver("node_suffix", lambda rank: f".node{rank}" if int(rank) > 0 else "")
    # ${basename:path}: model=auto names the run after the model's directory or repo.
    if not OmegaConf.has_resolver("basename"):
        OmegaConf.register_new_resolver("basename", lambda path: Path(str(path).rstrip("/")).name)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    for path in sorted(SWEEPS_DIR.glob("*.yaml")):
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")
