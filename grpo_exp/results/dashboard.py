"""A W&B workspace for grpo_exp runs, built by code with W&B's own `wandb-workspaces` library.

    grpo-exp dashboard --project grpo_exp --entity my-team              # saves the workspace view
    grpo-exp dashboard --project grpo_exp --group default/multirun_...  # one sweep group
    grpo-exp dashboard --project grpo_exp --report --group <group>      # also a report for it
    grpo-exp dashboard --project grpo_exp --dry-run                     # the spec as JSON, no network

Sections: memory per phase over steps (training ranks; the vLLM server's GPUs), peak memory planned
vs measured, the sweep as parallel coordinates (swept keys -> peak memory, tokens/s, exit code),
throughput and time shares, and a second view listing the OOM runs with their phase and rank.
Every panel names metrics real runs log (tests/results/test_dashboard.py checks them against a CPU run's
W&B file): history keys come through transformers' WandbCallback with its `train/` prefix, summary
keys are grpo_exp's summary.json.
"""

import argparse
import json
from pathlib import Path
from typing import Any

from grpo_exp import PHASES
from grpo_exp.core import metrics, rundir
from grpo_exp.core.metrics import BYTE_STATS, VLLM
from grpo_exp.core.records import Status

# The stats a GPU run has; a CPU run logs host_rss_max only (core/metrics.py).
GPU_STATS = tuple(s for s in BYTE_STATS if s != "host_rss_max")
PEAK_STATS = rundir.MEASURED_PEAK_STATS  # what a panel plots: the allocator, the device, the host
SWEPT = ("trainer.per_device_train_batch_size", "trainer.num_generations", "trainer.max_completion_length")


def history(phase: str, stat: str) -> str:
    return f"train/{metrics.memory(phase, stat)}"  # WandbCallback prefixes Trainer logs with train/


def panels_and_metrics():
    """(sections, oom_view_settings) as wandb-workspaces objects."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    memory = [
        wr.LinePlot(title=f"{phase}: peak memory, max over ranks (GiB)", y=[history(phase, s) for s in PEAK_STATS])
        for phase in PHASES
    ]
    memory.append(wr.LinePlot(title="vLLM server GPUs: device memory used (GiB)", y=[history(VLLM, "device_used_max")]))
    planned = [
        wr.ScatterPlot(
            title=f"peak per training process: planned (x) vs measured {stat} (y), GiB; on target = the y = x diagonal",
            x=wr.SummaryMetric(metrics.plan_peak("train")),
            y=wr.SummaryMetric(metrics.peak("train", stat)),
            regression=True,
        )
        for stat in PEAK_STATS
    ]
    planned.append(
        wr.BarPlot(title="planner error on model states (%)", metrics=[wr.SummaryMetric(metrics.MODEL_STATES_ERROR)])
    )
    sweep = [
        wr.ParallelCoordinatesPlot(
            title="sweep: swept keys -> peak memory, tokens/s, exit code",
            columns=[
                *[wr.ParallelCoordinatesPlotColumn(metric=wr.Config(key)) for key in SWEPT],
                *[
                    wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(metrics.peak("train", s)))
                    for s in ("reserved_max", "host_rss_max")
                ],
                wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(metrics.TOKENS_PER_S)),
                wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric("exit_code")),
            ],
        )
    ]
    throughput = [
        wr.BarPlot(title="tokens/s (prompt + completion)", metrics=[wr.SummaryMetric(metrics.TOKENS_PER_S)]),
        wr.BarPlot(title="time share per phase", metrics=[wr.SummaryMetric(metrics.time_share(p)) for p in PHASES]),
        wr.LinePlot(
            title="agentic runs: tool calls per episode, share of calls failed, share of episodes cut at a tool result",
            y=[f"train/{k}" for k in (metrics.TOOL_CALLS, metrics.TOOL_FAILURES, metrics.TOOL_DROPPED)],
        ),
    ]
    sections = [
        ws.Section(name="Memory per phase", panels=memory, is_open=True),
        ws.Section(name="Planned vs measured", panels=planned, is_open=True),
        ws.Section(name="Sweep", panels=sweep, is_open=True),
        ws.Section(name="Throughput and time", panels=throughput, is_open=True),
    ]
    return sections


def workspaces(project: str, entity: str, group: str | None):
    """The main view and the OOM view (its runs table: status oom, with phase, rank, bytes)."""
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces import expr

    in_group = [ws.Metric("Group") == group] if group else []
    main = ws.Workspace(
        entity=entity,
        project=project,
        name=f"grpo_exp memory{f': {group}' if group else ''}",
        sections=panels_and_metrics(),
        runset_settings=ws.RunsetSettings(filters=expr.And(*in_group) if in_group else ""),
    )
    ooms = ws.Workspace(
        entity=entity,
        project=project,
        name=f"grpo_exp OOMs{f': {group}' if group else ''}",
        sections=[],
        runset_settings=ws.RunsetSettings(
            filters=expr.And(*in_group, ws.Summary("status") == Status.OOM),
            pinned_columns=[
                "summary:oom.phase",
                "summary:oom.rank",
                "summary:oom.kind",
                "summary:oom.requested_bytes",
                "summary:status",
            ],
        ),
    )
    return [main, ooms]


def report(project: str, entity: str, group: str | None):
    """A report for one sweep group: its table and the same panels."""
    import wandb_workspaces.reports.v2 as wr

    runset = wr.Runset(entity=entity, project=project, filters=f"Group == '{group}'" if group else "")
    blocks = [
        wr.H1(f"grpo_exp sweep {group or project}"),
        wr.P("Peak memory per phase, planned vs measured, throughput. Built by grpo-exp dashboard."),
    ]
    for section in panels_and_metrics():
        blocks += [wr.H2(section.name), wr.PanelGrid(runsets=[runset], panels=section.panels)]
    return wr.Report(entity=entity, project=project, title=f"grpo_exp: {group or project}", blocks=blocks)


def spec(project: str, entity: str, group: str | None, with_report: bool) -> dict:
    """Everything the command would save, as plain JSON (W&B's own view models)."""
    out: dict[str, Any] = {
        "workspaces": [
            json.loads(w._to_model().model_dump_json(by_alias=True, exclude_none=True))
            for w in workspaces(project, entity, group)
        ]
    }
    if with_report:  # a report's runsets resolve the project through the W&B API: list its blocks instead
        built = report(project, entity, group)
        out["report"] = {
            "title": built.title,
            "blocks": [type(b).__name__ for b in built.blocks],
            "panels": [
                json.loads(p._to_model().model_dump_json(by_alias=True, exclude_none=True))
                for b in built.blocks
                if hasattr(b, "panels")
                for p in b.panels
            ],
        }
    return out


def metric_names(spec_json: dict) -> set[str]:
    """Every metric a spec's panels read (history keys, summary:/config: accessors stripped)."""
    names: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("metrics", "xAxis", "yAxis") and isinstance(value, (str, list)):
                    names.update(value if isinstance(value, list) else [value])
                elif key == "accessor" and isinstance(value, str):
                    names.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(spec_json)
    # W&B's spellings: "summary:x" / "summary_metrics.x" (summary), "config:a.value.b" (config a.b)
    plain = {n.split(":", 1)[-1].removeprefix("summary_metrics.").replace(".value.", ".") for n in names}
    return plain - {"_step", "Step"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo-exp dashboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", required=True)
    parser.add_argument("--entity", help="W&B entity (default: yours, from the API key)")
    parser.add_argument("--group", help="only the runs of this W&B group (a sweep: <experiment>/<sweep dir>)")
    parser.add_argument("--report", action="store_true", help="also save a report for the group")
    parser.add_argument("--dry-run", action="store_true", help="write the spec as JSON instead of saving (no network)")
    parser.add_argument(
        "--out", type=Path, default=Path("grpo_exp_dashboard.json"), help="where --dry-run writes the spec"
    )
    args = parser.parse_args(argv)
    if args.dry_run:
        data = spec(args.project, args.entity or "<your-entity>", args.group, args.report)
        args.out.write_text(json.dumps(data, indent=2) + "\n")
        names = sorted(metric_names(data))
        print(
            f"wrote {args.out}: {len(data['workspaces'])} workspace views{' and a report' if args.report else ''} "
            f"reading {len(names)} metrics:"
        )
        for name in names:
            print(f"  {name}")
        return 0
    import wandb

    entity = args.entity or wandb.Api().default_entity
    for view in workspaces(args.project, entity, args.group):
        view.save()
        print(f"saved workspace view {view.name}: {view.url}")
    if args.report:
        saved = report(args.project, entity, args.group).save()
        print(f"saved report: {saved.url}")
    return 0
