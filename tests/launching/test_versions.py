"""The version pairs, from package metadata only: a vLLM (or transformers) outside the range trl or vLLM
declares is named before launch with both versions and the range; preflight.versions=warn runs anyway."""

import importlib.metadata
import logging

import pytest

from grpo_exp.launching import versions
from tests.helpers import compose_cfg, problems


def fake_dist(root, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A dist-info directory importlib.metadata reads, as pip writes it (nothing importable behind it)."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory at the front of sys.path whose dist-infos shadow the installed ones."""
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    importlib.invalidate_caches()


def test_a_vllm_outside_trls_range_is_named_with_both_versions(site):
    fake_dist(site, "vllm", "0.33.0", ("transformers>=4.56",))
    cfg = compose_cfg("vllm=colocate")
    (found,) = versions.problems(cfg, serves=False, trains=True)
    assert found.key == "vllm.mode" and "vllm 0.33.0 is installed" in found.why and "vllm<=0.31.0,>=0.22.0" in found.why
    assert "pip install 'vllm<=0.31.0,>=0.22.0'" in found.fix
    assert versions.problems(compose_cfg("vllm=off"), serves=False, trains=True) == []  # no vLLM in this run
    assert versions.problems(compose_cfg("vllm=server"), serves=False, trains=True) == []  # trains only, no engine here
    assert len(versions.problems(compose_cfg("vllm=server"), serves=True, trains=False)) == 1  # the serving node


def test_vllms_own_transformers_range_is_checked(site):
    fake_dist(site, "vllm", "0.30.0", ("transformers<5",))
    (found,) = versions.problems(compose_cfg("vllm=colocate"), serves=False, trains=True)
    assert found.why.startswith("transformers 5.") and "vllm 0.30.0 supports transformers<5" in found.why


def test_warn_runs_anyway_and_says_so(site, caplog):
    fake_dist(site, "vllm", "0.33.0")
    cfg = compose_cfg("vllm=colocate", "preflight.versions=warn")
    with caplog.at_level(logging.WARNING):
        assert versions.check(cfg, serves=False, trains=True) == []
    assert "vllm 0.33.0 is installed" in caplog.text and "preflight.versions=warn" in caplog.text


def test_the_driver_refuses_before_launch_with_every_other_problem(site):
    fake_dist(site, "vllm", "0.33.0")
    found = problems("vllm=colocate")
    assert {"vllm.mode"} <= {p.key for p in found}
    assert any("0.33.0" in p.why for p in found) and any("vLLM's CPU build" in p.why for p in found)


def test_the_installed_stack_is_within_its_own_ranges():
    assert versions.problems(compose_cfg("vllm=colocate"), serves=True, trains=True) == []
