"""A config node as plain Python, typed: OmegaConf.to_container's result admits a dict, a list, a string or None
whatever the node, so each caller would check it again; these say which they expect and check it once."""

from typing import Any, cast

from omegaconf import OmegaConf


def mapping(node, resolve: bool = True) -> dict[str, Any]:
    """A mapping node (or None: {}) as a dict, interpolations resolved unless `resolve` is False."""
    if node is None:
        return {}
    found = OmegaConf.to_container(node, resolve=resolve)
    if not isinstance(found, dict):
        raise TypeError(f"expected a mapping, found {type(found).__name__}")
    return cast(dict[str, Any], found)


def sequence(node, resolve: bool = True) -> list[Any]:
    """A list node (or None: []) as a list, interpolations resolved unless `resolve` is False."""
    if node is None:
        return []
    found = OmegaConf.to_container(node, resolve=resolve)
    if not isinstance(found, list):
        raise TypeError(f"expected a list, found {type(found).__name__}")
    return found
