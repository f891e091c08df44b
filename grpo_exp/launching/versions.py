"""The version pairs a run depends on, checked before launch on every node that trains or serves, from
package metadata only (core/packages.py: nothing imported, so a vLLM that would crash on import is still
named). trl declares the vLLM it drives (trl 1.16: vllm>=0.22,<=0.31) and the transformers it needs; vLLM
declares its transformers. Outside a range, the weight-sync API or the generation path breaks mid-run, long
after launch; here it is exit 2 naming both versions and the range (preflight.versions=warn: a warning).
"""

import logging

from omegaconf import DictConfig

from grpo_exp import Problem
from grpo_exp.core import packages

log = logging.getLogger(__name__)


def _outside(key: str, dist: str, requirement) -> Problem | None:
    """A Problem when the installed `requirement.name` is outside the range `dist` declares for it."""
    if requirement is None:
        return None
    version = packages.installed(requirement.name)
    if version is None or requirement.specifier.contains(version, prereleases=True):
        return None
    name, wanted = requirement.name, f"{requirement.name}{requirement.specifier}"
    return Problem(
        key,
        f"{name} {version} is installed; {dist} {packages.installed(dist)} supports {wanted}",
        f"pip install '{wanted}' (or a {dist} release that supports {name} {version}), or preflight.versions=warn "
        "to run anyway",
    )


def problems(cfg: DictConfig, serves: bool, trains: bool) -> list[Problem]:
    """Every version pair this node's share of the run depends on that is out of its declared range."""
    found = []
    if trains:
        found.append(_outside("trainer", "trl", packages.declared("trl", "transformers")))
    if cfg.vllm.mode != "off" and (serves or (trains and cfg.vllm.mode == "colocate")):
        found.append(_outside("vllm.mode", "trl", packages.declared("trl", "vllm", extra="vllm")))
        found.append(_outside("vllm.mode", "vllm", packages.declared(packages.vllm_dist(), "transformers")))
    return [p for p in found if p is not None]


def check(cfg: DictConfig, serves: bool, trains: bool) -> list[Problem]:
    """problems(), as preflight.versions says: refused (returned), or logged as a warning (none returned)."""
    found = problems(cfg, serves, trains)
    if found and cfg.preflight.versions == "warn":
        for problem in found:
            log.warning("%s: %s (preflight.versions=warn: running anyway)", problem.key, problem.why)
        return []
    return found
