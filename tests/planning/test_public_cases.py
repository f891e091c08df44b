"""The public-cases table in docs/memory-planner.md: every row is planned again, and a flipped
verdict or a peak moved by more than 5% fails (update the row when a planner change means it)."""

import re

import pytest

from grpo_exp.planning import placement, planner
from tests.helpers import REPO, compose_cfg, fast_lane

DOC = REPO / "docs" / "memory-planner.md"


def _rows() -> list[dict]:
    section = DOC.read_text().split("## Public cases", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("["):
            case, _gpus, reported, verdict, peak, overrides, _note = cells
            rows.append(
                {
                    "case": re.match(r"\[([^\]]+)\]\((https?://[^)]+)\)", case).groups(),
                    "reported": reported,
                    "verdict": verdict,
                    "peak": float(peak),
                    "overrides": overrides.strip("`").split(),
                }
            )
    return rows


ROWS = _rows()


def test_the_table_has_a_dozen_sourced_cases():
    assert len(ROWS) >= 12
    assert all(url.startswith("https://github.com/") for _, url in (r["case"] for r in ROWS))


@pytest.mark.parametrize("row", fast_lane(ROWS, lambda r: r is ROWS[0]), ids=[r["case"][0] for r in ROWS])
def test_planner_verdict_and_peak_are_the_tables(row):
    cfg = compose_cfg(*row["overrides"])
    memory = planner.memory_plan(cfg, placement.make_plan(cfg, "config.yaml", detected_gpus=0))
    assert ("fits" if memory.fits else "OOM") == row["verdict"], f"{row['case'][0]}: the planner's verdict flipped"
    assert memory.train["peak_gib"] == pytest.approx(row["peak"], rel=0.05, abs=0.1)


def test_the_agreement_the_doc_states_is_the_tables():
    """The "reported" column against the planner's verdict: the count the doc states below the table is
    the rows' own (a report of a measured peak is not a verdict)."""
    stated = re.search(r"Agreement: (\d+) of the (\d+) reported verdicts", DOC.read_text())
    verdicts = [(r["reported"].split()[0], r["verdict"]) for r in ROWS if r["reported"].split()[0] in ("OOM", "fits")]
    agree = sum(reported == planned for reported, planned in verdicts)
    assert stated and (int(stated.group(1)), int(stated.group(2))) == (agree, len(verdicts)), (agree, len(verdicts))
