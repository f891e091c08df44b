"""The schema Hydra composes onto: OmegaConf's own node, read back from a cache keyed by the schema's fields, served
by grpo://schema on any search path, fresh for each compose."""

import dataclasses
import pickle
from typing import Any, List, Optional

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, ListConfig, OmegaConf

from grpo_exp.config import registry
from grpo_exp.config.schema import Config
from tests.helpers import compose_cfg


def _nodes(node, prefix=""):
    """(key, node class, ref_type, object_type, optional, flags) for every node below `node`."""
    for key in node.keys() if isinstance(node, DictConfig) else range(len(node)):
        child = node._get_node(key)
        meta = child._metadata
        yield f"{prefix}{key}", type(child), meta.ref_type, meta.object_type, meta.optional, meta.flags
        if isinstance(child, (DictConfig, ListConfig)) and not child._is_none() and not child._is_missing():
            yield from _nodes(child, f"{prefix}{key}.")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path / "cache"))
    registry.schema_pickle.cache_clear()
    yield tmp_path / "cache" / "schema"
    registry.schema_pickle.cache_clear()


def test_the_kept_schema_is_omegaconfs_own_node_and_is_read_back_without_building(fresh_cache, monkeypatch):
    built = OmegaConf.structured(Config)
    registry.schema_pickle()
    assert [p.name for p in fresh_cache.iterdir()] == [f"{registry.schema_digest()}.pickle"]

    def no_building(*args, **kwargs):
        raise AssertionError("built again although a node for this schema is kept")

    registry.schema_pickle.cache_clear()  # a new process
    monkeypatch.setattr(OmegaConf, "structured", no_building)
    kept = registry.schema_node()
    assert kept == built and OmegaConf.get_type(kept) is Config
    assert list(_nodes(kept)) == list(_nodes(built))  # every node's class, types, optionality and flags
    with pytest.raises(Exception, match="learning_rate"):
        kept.trainer.learning_rate = "fast"  # typed as built


def test_a_cache_cut_short_or_nowhere_to_write_never_stops_a_compose(fresh_cache, tmp_path):
    kept = fresh_cache / f"{registry.schema_digest()}.pickle"
    fresh_cache.mkdir(parents=True)
    kept.write_bytes(b"\x80\x05cut short")
    assert registry.schema_node() == OmegaConf.structured(Config)
    assert pickle.loads(kept.read_bytes()) == OmegaConf.structured(Config)  # written anew
    assert registry.schema_node() == OmegaConf.structured(Config)

    registry.schema_pickle.cache_clear()
    (tmp_path / "a_file").write_text("")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRPO_EXP_CACHE", str(tmp_path / "a_file"))  # no directory can be made there
        assert registry.schema_node() == OmegaConf.structured(Config)


def _inner(default: int) -> type:
    """A section named the same whatever its default: only its content tells two apart."""
    return dataclasses.make_dataclass("Inner", [("n", int, dataclasses.field(default=default))])


def _root(inner: type, hint=None, default=dataclasses.MISSING) -> type:
    section = (
        dataclasses.field(default_factory=inner)
        if default is dataclasses.MISSING
        else dataclasses.field(default=default)
    )
    return dataclasses.make_dataclass("Root", [("section", hint or inner, section)])


def test_a_change_to_any_field_of_any_section_names_another_cache_file():
    """The digest reads what OmegaConf.structured reads: a nested section's default, reached through its type, inside
    Optional or List, or through its default_factory alone."""
    one, two = _inner(1), _inner(2)
    base = registry.schema_digest(_root(one))
    assert registry.schema_digest(_root(one)) == base  # stable
    assert registry.schema_digest(_root(two)) != base  # a nested default
    for hint in (Optional, List):  # a section inside Optional[...] or List[...], no factory to reach it by
        assert registry.schema_digest(_root(one, hint[one], None)) != registry.schema_digest(
            _root(two, hint[two], None)
        )
    assert registry.schema_digest(_root(one, Any)) != registry.schema_digest(_root(two, Any))  # its factory alone
    assert registry.schema_digest(_root(one, Optional[str], None)) != registry.schema_digest(
        _root(one, Optional[int], None)
    )  # a type
    assert registry.schema_digest() != base


def test_grpo_schema_serves_a_fresh_node_on_any_search_path(tmp_path):
    source = registry.SchemaSource(provider="grpo_exp", path="grpo://schema")
    first, second = source.load_config("schema").config, source.load_config("schema.yaml").config
    assert first == second and first is not second  # a compose that edits its copy leaves the next one's alone
    assert source.is_config("schema") and not source.is_config("model") and not source.is_group("model")
    # a user's own hydra.searchpath replaces the config's, not the schema's source: unknown keys still fail
    cfg = compose_cfg(f"hydra.searchpath=[file://{tmp_path}]")
    assert OmegaConf.get_type(cfg) is Config
    with pytest.raises(ConfigCompositionException):
        compose_cfg(f"hydra.searchpath=[file://{tmp_path}]", "trainer.no_such_field=1")
