"""grpo_exp/__init__.py's helpers every stage shares: the one cache writer and loading modules with the garbage
collector paused."""

import gc

import pytest

from grpo_exp import imports_frozen, kept


def test_kept_bytes_are_read_back_written_whole_and_never_stop_a_run(tmp_path):
    """grpo_exp.kept, the one cache writer (the schema's node, TRL's serve argv, a model's meta-device facts)."""
    path = tmp_path / "cache" / "thing" / "abc.json"
    assert kept(path, lambda: b"built") == b"built" and path.read_bytes() == b"built"
    assert [p.name for p in path.parent.iterdir()] == ["abc.json"]  # renamed into place: no temporary file left
    assert kept(path, lambda: pytest.fail("built although kept")) == b"built"
    assert kept(path, lambda: b"again", rebuild=True) == b"again" and path.read_bytes() == b"again"

    def fails() -> bytes:
        raise RuntimeError("cannot build")

    with pytest.raises(RuntimeError):
        kept(tmp_path / "failed.json", fails)
    assert not (tmp_path / "failed.json").exists()  # a failure is not kept: the next run tries again
    (tmp_path / "a_file").write_text("")
    assert kept(tmp_path / "a_file" / "x.json", lambda: b"unwritable") == b"unwritable"  # no directory can be made


def test_imports_frozen_pauses_the_collector_then_freezes_what_was_made():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with imports_frozen():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]  # what a module would make: tracked objects
    assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(made)
    with pytest.raises(ImportError), imports_frozen():  # an import that fails leaves the collector as it found it
        raise ImportError("no such module")
    assert gc.isenabled()
    gc.disable()
    try:
        with imports_frozen():
            pass
        assert not gc.isenabled()  # a process that had it off keeps it off
    finally:
        gc.enable()
