"""grpo-exp compare: the table and its offline HTML report (plotly inline), rendered in a real headless Chromium."""

import shutil
import subprocess

import pytest

from grpo_exp.core import metrics


def _sweep():
    """A 2 x 2 sweep over num_generations and batch on 24 GiB: one cell near capacity, one OOM in reward."""
    from grpo_exp.results import compare

    cells = [(2, 4, "completed", 10.0), (2, 8, "completed", 16.0), (4, 4, "completed", 23.3), (4, 8, "oom", None)]
    runs = []
    for i, (g, b, status, peak) in enumerate(cells):
        summary = {"status": status, metrics.plan_capacity("train"): 24.0, metrics.plan_peak("train"): 20.0}
        summary[metrics.plan_component("train", "weights")] = 3.0
        summary[metrics.plan_phase("train", "train")] = 20.0
        if peak is not None:
            summary[metrics.peak("train", "host_rss_max")] = peak
            summary[metrics.peak_phase("train", "host_rss_max")] = peak
        else:
            summary["oom"] = {"phase": "reward", "rank": 1, "kind": "host"}
        overrides = {"trainer.num_generations": str(g), "trainer.per_device_train_batch_size": str(b)}
        runs.append(compare.Run(str(i), overrides, summary))
    return runs


def test_the_report_is_one_file_with_its_figures_headroom_and_the_table(tmp_path):
    from grpo_exp.results import compare, html_report

    runs = _sweep()
    page = compare.html_report(runs, tmp_path / "r.html", "sweep x").read_text()
    assert page.startswith("<!doctype html>") and "<title>sweep x</title>" in page
    assert 'src="http' not in page and "Plotly.newPlot" in page  # plotly.js inline: no network to view it
    assert page.count('class="plotly-graph-div"') == 3  # phases, components, the heatmap (steps: none logged)
    # rows: batch 4, 8; columns: num_generations 2, 4; 24 GiB of capacity
    batch4, batch8 = html_report.heatmap_figure(compare.sweep_grid(runs, compare.swept_keys(runs))).data[0].text
    assert list(batch4) == ["10.00 GiB<br>14.0 GiB free", "23.30 GiB<br>0.7 GiB free<br>⚠ near capacity"]
    assert list(batch8) == ["16.00 GiB<br>8.0 GiB free", "OOM<br>in reward"]
    assert "14.0 GiB free" in page and "near capacity" in page
    table = page[page.index("<h2>runs</h2>") :]  # compare's table, as rich exports it
    assert "trainer.num_generations" in table and table.count("completed") == 3 and "oom" in table


@pytest.mark.slow  # a browser start: make test runs it
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium here (.ci/run installs it where apt works)")
def test_the_report_renders_in_a_real_headless_chromium_without_script_errors(tmp_path):
    from grpo_exp.results import compare

    page = compare.html_report(_sweep(), tmp_path / "r.html", "sweep x")
    browser = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--virtual-time-budget=5000",
        "--dump-dom",
        f"file://{page}",
    ]
    shown = subprocess.run(browser, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.count("js-plotly-plot") >= 3  # each figure drawn by plotly, in the live DOM
    assert "<svg" in shown.stdout and "near capacity" in shown.stdout
    assert "Uncaught" not in shown.stderr, shown.stderr[-2000:]
