"""What Hydra must know before it composes a run: the typed schema and the resolvers the config's interpolations
use. __main__ calls it where the command starts (and registers the frontier sweeper beside it); tests compose after
it too.

The schema reaches Hydra through a config source of its own (grpo://schema) rather than Hydra's ConfigStore: Hydra
deep-copies the whole store once per compose and each node it loads from it again, ~40 ms for this one node, while the
source hands each compose a node unpickled from a cache (~3 ms)."""

import dataclasses
import functools
import hashlib
import pickle
import secrets
import sys
import typing
from pathlib import Path

import omegaconf
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import DictConfig, OmegaConf

from grpo_exp import cache_root, kept
from grpo_exp.config.schema import Config
from grpo_exp.core.rundir import node_subdir


@functools.cache  # once per process: resolvers and plugins outlive every compose (a recipe's check composes again
# after the command line's)
def register_configs() -> None:
    """Make `schema` (grpo://schema) and our resolvers known to Hydra."""
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
    plugins = Plugins.instance()
    plugins.register(SchemaSource)
    plugins.register(SchemaSearchPath)


class SchemaSource(ConfigSource):
    """grpo://schema: `schema` (conf/config.yaml's first default) for Hydra's composer, a fresh node for each load."""

    @staticmethod
    def scheme() -> str:
        return "grpo"

    def load_config(self, config_path: str) -> ConfigResult:
        if not self.is_config(config_path):
            raise ConfigLoadError(f"grpo://schema holds `schema` only, not {config_path}")
        return ConfigResult(
            config=schema_node(), path="grpo://schema", provider=self.provider, header={"package": None}
        )

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path == ""

    def is_config(self, config_path: str) -> bool:
        return self._normalize_file_name(config_path) == "schema.yaml"

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        return ["schema"] if config_path == "" and results_filter in (None, ObjectType.CONFIG) else []


class SchemaSearchPath(SearchPathPlugin):
    """Puts grpo://schema on every search path, whatever hydra.searchpath a user gives."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="grpo_exp", path="grpo://schema")


def schema_node() -> DictConfig:
    """A fresh OmegaConf.structured(Config), the typed node every compose starts from: unpickled from the kept copy."""
    try:
        return pickle.loads(schema_pickle())
    except Exception:  # a kept file this Python cannot read back (a cache never stops a run): built anew, kept again
        return pickle.loads(schema_pickle(rebuild=True))


@functools.cache
def schema_pickle(rebuild: bool = False) -> bytes:
    """OmegaConf.structured(Config), pickled. Building it takes ~50 ms of each start (two thirds of it OmegaConf
    deep-copying each nested section into its parent); reading it back takes ~3 ms. So it is kept under
    cache_root()/schema/, in a file named by the digest of everything it is built from (schema_digest): a change to
    any field of any section builds and keeps a new one."""
    return kept(
        cache_root() / "schema" / f"{schema_digest()}.pickle",
        lambda: pickle.dumps(OmegaConf.structured(Config), protocol=pickle.HIGHEST_PROTOCOL),
        rebuild=rebuild,
    )


def schema_digest(root: type = Config) -> str:
    """A digest of all that OmegaConf.structured reads to build `root`'s node: each section's dataclass parameters and
    bases, and each field's name, type and default, through nested sections (a field's type, inside Optional, List or
    Dict too, and a default_factory), with OmegaConf's and Python's versions."""
    rows: list = [omegaconf.__version__, sys.version_info[:2]]
    seen: set[type] = set()

    def walk(kind: type) -> None:
        if kind in seen:
            return
        seen.add(kind)
        params = kind.__dataclass_params__  # type: ignore[attr-defined]  # frozen=True: OmegaConf makes it read-only
        rows.append((kind.__module__, [base.__qualname__ for base in kind.__mro__], repr(params)))
        hints = typing.get_type_hints(kind)
        for f in dataclasses.fields(kind):
            factory = f.default_factory
            if f.default is not dataclasses.MISSING:
                default = repr(f.default)
            elif dataclasses.is_dataclass(factory):
                default = factory.__qualname__
                walk(factory)
            elif factory is not dataclasses.MISSING:
                default = repr(factory())
            else:
                default = "no default"
            rows.append((f.name, f.init, repr(hints[f.name]), default))
            for inner in _types_in(hints[f.name]):
                if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                    walk(inner)

    walk(root)
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def _types_in(hint) -> list:
    """`hint` and every type inside it (Optional[X], List[X], Dict[str, X])."""
    return [hint, *(inner for arg in typing.get_args(hint) for inner in _types_in(arg))]
