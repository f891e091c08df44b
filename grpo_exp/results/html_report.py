"""The offline report: one self-contained HTML file (plotly, its JavaScript inline: no network to view it) for a
run or a sweep, the dashboard of a team without W&B.

    the run report's facts          status, steps, reward, tokens/s, time per phase (results/report.py)
    memory per phase                measured peak beside the plan, per run
    planned components              what the planner put in the train phase (weights, optimizer, ...)
    memory over steps               per phase: the max over ranks (one run: the mean beside it), the argmax rank
                                    on hover
    the sweep heatmap               peak per cell of the first two swept axes, with its headroom against
                                    capacity; cells within HEADROOM_WARN_GIB flagged, OOM cells with their phase
    the table                       compare's table (rich's export)

compare.py writes it (`grpo-exp compare <run or sweep dir>` -> compare.html).
"""

import html
from pathlib import Path

from grpo_exp import PHASES
from grpo_exp.core import metrics, rundir
from grpo_exp.results import report

HEADROOM_WARN_GIB = 2.0  # a cell closer than this to its capacity is flagged: "fits" with 0.7 GiB to spare is luck
_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body {{ font-family: sans-serif; margin: 1.5em; color: #222 }} .facts {{ font-family: monospace }}
.fig {{ margin: 1em 0 }} h2 {{ margin-top: 1.5em }}</style></head><body><h1>{title}</h1>{body}</body></html>
"""


def _figure(fig, first: bool) -> str:
    """One figure as a div; the first carries plotly's JavaScript inline (the page needs no network)."""
    import plotly.io as pio

    return f'<div class="fig">{pio.to_html(fig, include_plotlyjs=True if first else False, full_html=False)}</div>'


def _stat(summary: dict) -> str:
    found = rundir.measured_peak(summary)
    return found[0] if found else "host_rss_max"


def phase_figure(runs: list):
    """Per phase, each run's measured peak beside its planned one (GiB)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for run in runs:
        measures = {p: rundir.phase_measure(run.summary, p) for p in PHASES}
        phases = [p for p, (_, measured, planned) in measures.items() if measured is not None or planned]
        fig.add_bar(name=f"{run.name} measured", x=phases, y=[measures[p][1] for p in phases])
        fig.add_bar(name=f"{run.name} planned", x=phases, y=[measures[p][2] for p in phases], marker_pattern_shape="/")
    title = "peak memory per phase: measured and planned (GiB per training process; on a GPU the tensors alive)"
    fig.update_layout(title=title, barmode="group")
    return fig


def component_figure(runs: list):
    """The planner's train-phase components per run, stacked (GiB)."""
    import plotly.graph_objects as go

    prefix = "plan/train/"
    names = sorted(
        {
            k[len(prefix) : -len("_gib")]
            for run in runs
            for k, v in run.summary.items()
            if k.startswith(prefix)
            and k.endswith("_gib")
            and "/" not in k[len(prefix) :]
            and k != metrics.plan_peak("train")
            and isinstance(v, (int, float))
            and v > 0
        }
    )
    fig = go.Figure()
    for name in names:
        fig.add_bar(
            name=name,
            x=[run.name for run in runs],
            y=[run.summary.get(metrics.plan_component("train", name)) for run in runs],
        )
    fig.update_layout(title="planned memory by component (GiB per training process)", barmode="stack")
    return fig


def steps_figure(runs: list):
    """Memory over the logged steps, per phase: the max over ranks (solid), the mean (dotted), the rank that
    held the max on hover; local runs only (metrics.jsonl)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for run in runs:
        records = rundir.read_metrics(run.path) if run.path is not None else []
        stat = _stat(run.summary)
        for phase in PHASES:
            key = metrics.memory(phase, stat)
            rows = [r for r in records if isinstance(r.get(key), (int, float))]
            if not rows:
                continue
            steps = [r["step"] for r in rows]
            ranks = [r.get(metrics.across_ranks(key, "argmax_rank")) for r in rows]
            fig.add_scatter(
                name=f"{run.name} {phase} max",
                x=steps,
                y=[r[key] for r in rows],
                mode="lines+markers",
                customdata=ranks,
                hovertemplate="step %{x}: %{y:.3f} GiB (rank %{customdata})",
            )
            mean = [r.get(metrics.across_ranks(key, "mean")) for r in rows]
            if len(runs) == 1 and any(v is not None for v in mean):  # a sweep's figure keeps to the maxima
                fig.add_scatter(name=f"{run.name} {phase} mean", x=steps, y=mean, mode="lines", line_dash="dot")
    fig.update_layout(
        title="memory over steps per phase (GiB; max over ranks, and for one run the mean dotted)",
        xaxis_title="step",
        xaxis_dtick=1,
    )
    return fig


def heatmap_figure(grid: tuple | None):
    """Peak memory over the first two swept axes (compare.sweep_grid: the same grid as the PNG heatmap), each cell
    with its headroom against its capacity; failed cells labelled with their status (and an OOM's phase); None
    without two swept axes."""
    import plotly.graph_objects as go

    if grid is None:
        return None
    xk, yk, xs, ys, cells = grid
    z = [[None for _ in xs] for _ in ys]
    text = [["" for _ in xs] for _ in ys]
    for i, j, run, fitted in cells:
        capacity = run.summary.get(metrics.plan_capacity("train"))
        if fitted and run.peak_gib is not None:
            z[i][j] = run.peak_gib
            headroom = capacity - run.peak_gib if capacity is not None else None
            text[i][j] = f"{run.peak_gib:.2f} GiB" + (f"<br>{headroom:.1f} GiB free" if headroom is not None else "")
            if headroom is not None and headroom < HEADROOM_WARN_GIB:
                text[i][j] += "<br>⚠ near capacity"
        else:
            phase = (run.summary.get("oom") or {}).get("phase")
            text[i][j] = ("pred. OOM" if run.planned else run.status.upper()) + (f"<br>in {phase}" if phase else "")
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=xs,
            y=ys,
            text=text,
            texttemplate="%{text}",
            colorscale="Viridis",
            colorbar_title="GiB",
            hoverongaps=False,
        )
    )
    fig.update_layout(
        title=f"peak memory per training process and headroom (cells within {HEADROOM_WARN_GIB:g} GiB of capacity "
        "flagged; blank cells failed)",
        xaxis_title=xk,
        yaxis_title=yk,
        xaxis_type="category",
        yaxis_type="category",
    )
    return fig


def write(runs: list, grid: tuple | None, table_html: str, path: Path, title: str) -> Path:
    """The report for `runs` (compare.Run) to `path`; `grid` the sweep's (compare.sweep_grid; None without two
    swept axes), `table_html` compare's table."""

    facts = "".join(
        f"<p class='facts'><b>{html.escape(run.name)}</b>: "
        + " | ".join(html.escape(line) for line in report.headline(run.summary))
        + "</p>"
        for run in runs
    )
    figures = [phase_figure(runs), component_figure(runs), steps_figure(runs), heatmap_figure(grid)]
    shown = [fig for fig in figures if fig is not None and fig.data]
    body = facts + "".join(_figure(fig, first=i == 0) for i, fig in enumerate(shown)) + "<h2>runs</h2>" + table_html
    path.write_text(_PAGE.format(title=html.escape(title), body=body))
    return path
