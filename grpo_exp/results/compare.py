"""Compare runs: a terminal table, a heatmap of peak memory over the two swept axes (OOM cells
marked; a PNG), and a self-contained HTML report (html_report.py: the figures, interactive, no network).

    grpo-exp compare outputs/batch_x_generations/multirun_2026-11-22_10-00-00
    grpo-exp compare run_dir_a run_dir_b --out report/
    grpo-exp compare wandb:my-entity/grpo_exp --group batch_x_generations
    grpo-exp compare mlflow:default/multirun_2026-11-22_10-00-00_ab12    # at MLFLOW_TRACKING_URI
    grpo-exp compare trackio:grpo_exp                                   # a trackio project (TRACKIO_DIR)

Local run dirs need no W&B: everything comes from summary.json and .hydra/overrides.yaml.
"""

import argparse
from functools import partial
from pathlib import Path

from grpo_exp import trackers
from grpo_exp.config.overrides import values
from grpo_exp.core import metrics, rundir
from grpo_exp.core.records import Status
from grpo_exp.core.runs import Run
from grpo_exp.planning import calibration
from grpo_exp.results import calibrate
from grpo_exp.results import html_report as page
from grpo_exp.results import report as run_report

FAILED_STATUSES = {
    "oom": "OOM",
    "predicted_oom": "pred. OOM",
    "failed": "failed",
    "invalid": "invalid",
    "mismatch": "mismatch",
    "stalled": "stalled",
    "node_lost": "node lost",
    "interrupted": "interrupted",
}


def load_local(path: Path) -> list[Run]:
    """One run dir, or every run dir (with a summary.json) directly below a multirun dir."""
    return [
        Run(d.name, values(rundir.read_overrides(d)), rundir.read_summary(d), d.resolve())
        for d in rundir.run_dirs(path)
    ]


def tracker_loaders(group: str | None = None) -> dict:
    """The sources that are a tracker's runs, by prefix (`<SOURCE>:`), with their loaders (every other source is a run
    or sweep dir); `group` selects a tracker's group where it has them (W&B)."""
    return {f"{c.SOURCE}:": partial(c.load_runs, group=group) for c in trackers.components() if hasattr(c, "SOURCE")}


def load(sources: list[str], group: str | None = None) -> list[Run]:
    loaders, runs = tracker_loaders(group), list[Run]()
    for source in sources:
        prefix = next((p for p in loaders if source.startswith(p)), None)
        runs += loaders[prefix](source.removeprefix(prefix)) if prefix else load_local(Path(source))
    return runs


def swept_keys(runs: list[Run]) -> list[str]:
    """Override keys whose values differ between runs, in the order they were given."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.overrides if k not in keys]
    return [k for k in keys if len({run.overrides.get(k) for run in runs}) > 1]


def rows(runs: list[Run]) -> list[dict]:
    keys = swept_keys(runs)
    if runs and all(run.planned for run in runs):  # a planning sweep: the planner's verdicts
        return [
            {
                "run": run.name,
                **{k: run.overrides.get(k, "") for k in keys},
                "verdict": "fits" if run.summary.get("fits") else "OOM",
                "plan GiB": run.summary.get(metrics.plan_peak("train")),
                "vLLM GiB": run.summary.get(metrics.plan_peak(metrics.VLLM)),
                "top fix": run.summary.get("suggestion") or "",
            }
            for run in runs
        ]
    agentic = any(final(run, metrics.TOOL_CALLS) is not None for run in runs)  # tool calls beside memory
    out = []
    for run in runs:
        s = run.summary
        out.append(
            {
                "run": run.name,
                **{k: run.overrides.get(k, "") for k in keys},
                "status": run.status,
                "peak GiB": run.peak_gib,
                "vLLM GiB": s.get(metrics.peak(metrics.VLLM, "device_used_max")),
                "tokens/s": s.get(metrics.TOKENS_PER_S),
                "gen share": s.get(metrics.time_share("generate")),
                **(
                    {"tool calls": final(run, metrics.TOOL_CALLS), "tools share": s.get(metrics.time_share("tools"))}
                    if agentic
                    else {}
                ),
                "plan GiB": s.get(metrics.plan_peak("train")),
                "plan err %": run.planner_error_pct,
                **(
                    {"train err %": run.train_error_pct, "calibrated err %": run.calibrated_error_pct}
                    if any(r.calibrated_error_pct is not None for r in runs)
                    else {}
                ),
                "oom phase": (s.get("oom") or {}).get("phase"),
            }
        )
    return out


def final(run: Run, key: str):
    """A metric of the run's last logging step (summary.json's final_metrics; a W&B run's summary)."""
    return (run.summary.get("final_metrics") or {}).get(key, run.summary.get(key))


def apply_calibration(runs: list[Run], path: Path) -> None:
    """Each measured local run gains the planner's train-phase error without and with the factors
    in `path` (a file from grpo-exp calibrate)."""

    data = calibration.load(path)
    factors, runtimes = data["factors"], data.get(calibration.RUNTIME, {})
    for run in runs:
        sample = calibrate.sample(run.path) if run.path is not None else None
        if sample is not None:
            calibrated = calibration.predict(calibrate.with_measured_runtime(sample, runtimes), factors)
            run.train_error_pct = 100 * (calibration.predict(sample, {}) - sample["measured"]) / sample["measured"]
            run.calibrated_error_pct = 100 * (calibrated - sample["measured"]) / sample["measured"]


def _fmt(value) -> str:
    """A cell as text: a run's values ([a,b] lists, error texts) are never read as rich markup."""
    from rich.markup import escape

    if value is None:
        return ""
    return f"{value:.3g}" if isinstance(value, float) else escape(str(value))


def table(runs: list[Run], title: str = "runs", full_keys: bool = False):
    """The runs as a rich Table (swept keys by their last part unless `full_keys`), or None without runs;
    each trial's name links to its run dir (a terminal or browser with links opens it)."""
    from rich.table import Table

    data = rows(runs)
    if not data:
        return None
    out = Table(title=title)
    for column in data[0]:
        left = column in ("run", "status", "verdict", "top fix", "oom phase")
        out.add_column(column if full_keys else column.rsplit(".", 1)[-1], justify="left" if left else "right")
    for run, row in zip(runs, data, strict=True):
        style = None if row.get("status", row.get("verdict")) in (Status.COMPLETED, "fits") else "red"
        cells = {key: _fmt(value) for key, value in row.items()}
        if run.path is not None:
            cells["run"] = f"[link=file://{run.path}]{cells['run']}[/link]"
        out.add_row(*cells.values(), style=style)
    return out


def print_table(runs: list[Run], title: str = "runs") -> None:
    from rich.console import Console

    shown = table(runs, title)
    if shown is not None:
        Console(width=160).print(shown)


def sweep_grid(runs: list[Run], keys: list[str]):
    """The first two swept axes as a grid: (x key, y key, x values, y values in numeric order, and per run on it
    (row, column, run, whether it fitted: planned to, or completed))."""
    xk, yk = keys[0], keys[1]

    def ordered(k):
        values = {run.overrides[k] for run in runs if k in run.overrides}
        return sorted(values, key=lambda v: (float(v) if _parses_as_number(v) else float("inf"), v))

    xs, ys = ordered(xk), ordered(yk)
    cells = [
        (
            ys.index(run.overrides[yk]),
            xs.index(run.overrides[xk]),
            run,
            run.summary.get("fits") if run.planned else run.status == Status.COMPLETED,
        )
        for run in runs
        if run.overrides.get(xk) in xs and run.overrides.get(yk) in ys
    ]
    return xk, yk, xs, ys, cells


def heatmap(runs: list[Run], path: Path) -> Path | None:
    """Peak memory over the first two swept axes; failed cells are labelled (OOM, pred. OOM, ...)."""
    keys = swept_keys(runs)
    if len(keys) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    xk, yk, xs, ys, cells = sweep_grid(runs, keys)
    grid = np.full((len(ys), len(xs)), np.nan)
    labels = [["" for _ in xs] for _ in ys]
    for i, j, run, fitted in cells:
        if fitted and run.peak_gib is not None:
            grid[i, j] = run.peak_gib
            labels[i][j] = f"{run.peak_gib:.2f}"
        else:
            labels[i][j] = "pred. OOM" if run.planned else FAILED_STATUSES.get(run.status, run.status)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(xs), 1.2 + 0.9 * len(ys)))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", origin="lower", aspect="auto")
    for i in range(len(ys)):
        for j in range(len(xs)):
            failed = np.isnan(grid[i, j])
            if failed and labels[i][j]:
                ax.add_patch(
                    plt.Rectangle(
                        (j - 0.5, i - 0.5), 1, 1, facecolor="#d62728", alpha=0.85, hatch="//", edgecolor="white"
                    )
                )
            ax.text(
                j,
                i,
                labels[i][j],
                ha="center",
                va="center",
                color="white",
                fontsize=10,
                fontweight="bold" if failed else "normal",
            )
    ax.set_xticks(range(len(xs)), xs)
    ax.set_yticks(range(len(ys)), ys)
    ax.set_xlabel(xk)
    ax.set_ylabel(yk)
    ax.set_title(
        "predicted peak memory per training process (GiB)"
        if all(r.planned for r in runs)
        else "peak memory per training process (GiB)"
    )
    fig.colorbar(image, ax=ax, label="GiB")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _parses_as_number(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def html_report(runs: list[Run], path: Path, title: str) -> Path:
    """One self-contained HTML file (html_report.py): the figures, and the table as rich exports it."""
    import io

    from rich.console import Console

    console = Console(record=True, file=io.StringIO(), width=220)
    shown = table(runs, title, full_keys=True)
    if shown is not None:
        console.print(shown)
    table_html = console.export_html(
        code_format='<pre style="font-family: Menlo, monospace">{code}</pre>', inline_styles=True
    )
    keys = swept_keys(runs)
    grid = sweep_grid(runs, keys) if len(keys) >= 2 else None
    return page.write(runs, grid, table_html, path, title)


def report(
    sources: list[str], out: Path | None = None, group: str | None = None, calibration: Path | None = None
) -> dict:
    if len(sources) == 1 and (Path(sources[0]) / rundir.SUMMARY).exists():  # one run: its run report
        run_report.print_report(Path(sources[0]))
    runs = load(sources, group)
    if calibration is not None:
        apply_calibration(runs, calibration)
    title = ", ".join(sources)
    print_table(runs, title)
    out = out or (Path(".") if sources[0].startswith(tuple(tracker_loaders())) else Path(sources[0]))
    out.mkdir(parents=True, exist_ok=True)
    png = heatmap(runs, out / "compare_heatmap.png")
    page = html_report(runs, out / "compare.html", title)
    return {"runs": len(runs), "heatmap": png, "html": page}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="grpo-exp compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sources",
        nargs="+",
        help="multirun dir, run dirs, or a tracker's runs: "
        + ", ".join(
            f"{c.SOURCE}:<{c.load_runs.__code__.co_varnames[0]}>" for c in trackers.components() if hasattr(c, "SOURCE")
        ),
    )
    parser.add_argument("--out", type=Path, help="where the PNG and HTML go (default: the first source)")
    parser.add_argument("--group", help="W&B group (a sweep) to select")
    parser.add_argument(
        "--calibration",
        type=Path,
        help="a file from grpo-exp calibrate: adds the planner's error per run before and after it",
    )
    args = parser.parse_args(argv)
    result = report(args.sources, args.out, args.group, args.calibration)
    print(f"{result['runs']} runs; heatmap: {result['heatmap'] or '(needs two swept axes)'}; report: {result['html']}")
