"""The suite itself: shared runs are made once, on one xdist worker."""

import pytest

from tests.helpers import REPO


@pytest.mark.slow
def test_tests_reading_one_shared_run_share_one_xdist_worker(tmp_path):
    """make test's speed rests on it: under --dist loadgroup every test reading a shared run goes to the
    worker that made it (tests/conftest.py; xdist alone lost the groups on pytest 9)."""
    import os
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(
        "from tests import conftest\n\npytest_collection_modifyitems = conftest.pytest_collection_modifyitems\n"
    )
    (tmp_path / "test_groups.py").write_text(
        "import os, pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def two_job_sweep():\n    return os.environ['PYTEST_XDIST_WORKER']\n"
        + "".join(f"def test_{i}(two_job_sweep):\n    print(two_job_sweep)\n" for i in range(6))
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    workers = {line.split("]")[0] for line in out.stdout.splitlines() if "PASSED" in line}
    assert out.returncode == 0 and len(workers) == 1, out.stdout[-2000:]


@pytest.mark.slow
def test_every_matrix_keeps_a_representative_case_in_make_test():
    """A test function whose cases are marked `matrix` (make test-matrix) keeps at least one unmarked case that make
    test runs (tests/helpers.py matrix()), and make test selects none of the marked ones."""
    import subprocess
    import sys

    files = sorted(str(p) for p in (REPO / "tests").rglob("test_*.py") if "matrix(" in p.read_text())

    def functions(marks: str) -> set[str]:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marks, *files],
            capture_output=True,
            text=True,
            cwd=REPO,
        ).stdout
        return {line.split("[")[0] for line in out.splitlines() if "::" in line}

    marked, kept = functions("matrix"), functions("not matrix")
    assert len(files) >= 4 and marked, files
    assert marked <= kept, f"no representative case left in make test: {sorted(marked - kept)}"
