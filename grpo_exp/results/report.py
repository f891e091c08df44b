"""The run report: what a run was, from its summary.json alone, as one compact terminal table.

Printed by the driver at the end of every run, and by `grpo-exp compare <run dir>`:
status, steps, reward first -> last, tokens/s, the time share of each phase, and per role and
phase the measured peak beside the planner's with the error; for an OOM, where and how much.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_exp import GIB, PHASES
from grpo_exp.core import metrics, rundir
from grpo_exp.core.metrics import VLLM
from grpo_exp.core.records import Status


def _measure(summary: Mapping[str, Any]) -> str:
    """The measured stat a report shows (rundir.measured_peak: the allocator on a GPU, the RSS on a CPU)."""
    found = rundir.measured_peak(summary)
    return found[0] if found else "host_rss_max"


def printable(text: str) -> str:
    """`text` as a terminal shows it safely: control characters (an ANSI escape a library printed) made visible."""
    return "".join(c if c.isprintable() or c in "\t" else repr(c)[1:-1] for c in text)


def _compared(summary: Mapping[str, Any]) -> str:
    """What the memory table compares, said in its title."""
    peak = _measure(summary)
    phase = rundir.phase_measure(summary, "train")[0]
    if phase == peak:
        return f"peak memory per process (GiB, {peak}; max over ranks): measured vs planned"
    return f"peak memory per process (GiB, max over ranks): phases {phase} vs planned tensors, peak {peak} vs plan"


def _gib(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def _error(measured, planned) -> str:
    if not isinstance(measured, (int, float)) or not isinstance(planned, (int, float)) or not measured:
        return "-"
    return f"{100 * (planned - measured) / measured:+.0f}%"


def memory_rows(summary: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(role, phase, measured GiB, planned GiB, planner error) for every phase with either value."""
    stat = _measure(summary)
    rows = []
    for phase in PHASES:
        _, measured, planned = rundir.phase_measure(summary, phase)
        if measured is not None or planned is not None:
            rows.append(("train", phase, _gib(measured), _gib(planned), _error(measured, planned)))
    rows.append(
        (
            "train",
            "peak",
            _gib(summary.get(metrics.peak("train", stat))),
            _gib(summary.get(metrics.plan_peak("train"))),
            _error(summary.get(metrics.peak("train", stat)), summary.get(metrics.plan_peak("train"))),
        )
    )
    node_rss, host_plan = summary.get(metrics.peak("train", metrics.NODE_RSS)), summary.get(metrics.plan_peak("host"))
    # a server on CPU (planned as host RAM of its node: plan/host/vllm_server) runs on node 0 beside its ranks
    cpu_server = (
        summary.get(metrics.peak(VLLM, "host_rss_max"))
        if metrics.plan_component("host", "vllm_server") in summary
        else None
    )
    if node_rss is not None and cpu_server is not None:  # peaks added: an upper bound of the node's peak
        node_rss += cpu_server
    if node_rss is not None or host_plan is not None:  # the fullest node's RAM: its ranks added up
        rows.append(("host", "node RAM", _gib(node_rss), _gib(host_plan), _error(node_rss, host_plan)))
    # a server's GPUs (NVML), else its processes' RSS (a CPU server: launching/vllm_server.ServerMemory)
    vllm = next(
        (
            summary[k]
            for k in (metrics.peak(VLLM, "device_used_max"), metrics.peak(VLLM, "host_rss_max"))
            if k in summary
        ),
        None,
    )
    if vllm is not None or summary.get(metrics.plan_peak(VLLM)) is not None:
        rows.append(
            (
                VLLM,
                "generate",
                _gib(vllm),
                _gib(summary.get(metrics.plan_peak(VLLM))),
                _error(vllm, summary.get(metrics.plan_peak(VLLM))),
            )
        )
    return rows


def headline(summary: Mapping[str, Any]) -> list[str]:
    first, last = (summary.get("first_metrics") or {}).get("reward"), (summary.get("final_metrics") or {}).get("reward")
    parts = [f"{summary.get('status', 'unknown')} (exit {summary.get('exit_code')})"]
    if summary.get("global_step") is not None:
        parts.append(f"{summary['global_step']} steps")
    if summary.get("wall_s") is not None:
        parts.append(f"{summary['wall_s']:.1f} s")
    if isinstance(first, (int, float)) and isinstance(last, (int, float)):
        parts.append(f"reward {first:.3f} -> {last:.3f}")
    if summary.get(metrics.TOKENS_PER_S) is not None:
        parts.append(f"{summary[metrics.TOKENS_PER_S]:,.0f} tokens/s")
    lines = [" | ".join(parts)]
    shares = [f"{p} {100 * summary[metrics.time_share(p)]:.0f}%" for p in PHASES if summary.get(metrics.time_share(p))]
    if shares:
        lines.append("time: " + " | ".join(shares))
    tools = _tool_line(summary)
    if tools:
        lines.append(tools)
    oom = summary.get("oom")
    if oom:
        requested = oom.get("requested_bytes")
        lines.append(
            f"OOM in phase {oom.get('phase')} on rank {oom.get('rank')} ({oom.get('kind')})"
            + (f": {requested / GIB:.2f} GiB requested" if requested else "")
            + (f": killed by the kernel's OOM killer on node {oom.get('node')}" if oom.get("killed_by") else "")
        )
    elif summary.get("error") and summary.get("status") != Status.COMPLETED:
        lines.append(str(summary["error"]).splitlines()[0][:180])
    return lines


# The engine's start-up figures vLLM logs (core/vllm_log.py) beside the planner's (planning/vllm_engine.py).
ENGINE_ROWS = ("weights", "profile_activations", "non_torch", "cuda_graphs", "kv_cache")


def engine_rows(summary: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(component, logged by vLLM, planned, planner error) per engine GPU; [] when vLLM logged nothing."""
    if not any(k.startswith(metrics.vllm_startup("")) for k in summary):
        return []
    rows = []
    for part in ENGINE_ROWS:
        logged, planned = (
            summary.get(metrics.vllm_startup(f"{part}_gib")),
            summary.get(metrics.plan_engine(f"{part}_gib")),
        )
        if logged is not None or planned is not None:
            rows.append((part, _gib(logged), _gib(planned), _error(logged, planned)))
    logged, planned = summary.get(metrics.vllm_startup("kv_tokens")), summary.get(metrics.plan_engine("kv_tokens"))
    if logged is not None or planned is not None:
        logged_text, planned_text = (f"{v:,.0f}" if isinstance(v, (int, float)) else "-" for v in (logged, planned))
        rows.append(("kv_cache tokens", logged_text, planned_text, _error(logged, planned)))
    return rows


def _tool_line(summary: Mapping[str, Any]) -> str | None:
    """An agentic run's tool use, first and last logging step (TRL's tools/* metrics)."""
    first, last = (summary.get(k) or {} for k in ("first_metrics", "final_metrics"))
    if last.get(metrics.TOOL_CALLS) is None:
        return None
    calls = f"{last[metrics.TOOL_CALLS]:.2f}"
    if first.get(metrics.TOOL_CALLS) is not None:
        calls = f"{first[metrics.TOOL_CALLS]:.2f} -> {calls}"
    failed = last.get(metrics.TOOL_FAILURES)
    return f"tools: {calls} calls per episode" + (
        f" | {100 * failed:.0f}% of calls failed" if failed is not None else ""
    )


def print_report(run_dir: Path, summary: Mapping[str, Any] | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    summary = summary if summary is not None else rundir.read_summary(run_dir)
    console = Console(width=100)
    console.print(f"[bold]run report[/] {escape(str(run_dir))}")
    for line in headline(summary):  # error texts are what a rank or a library wrote: shown as text, never markup
        console.print(f"  {printable(line)}", markup=False, highlight=False)
    # titles on a line of their own: a table's title wraps at the table's width (~55 columns)
    console.print(f"[italic]{_compared(summary)}")
    table = Table()
    for column in ("role", "phase", "measured", "planned", "plan error"):
        table.add_column(column, justify="left" if column in ("role", "phase") else "right")
    for row in memory_rows(summary):
        table.add_row(*row)
    console.print(table)
    rows = engine_rows(summary)
    if rows:
        console.print("[italic]vLLM engine at start-up (GiB, one engine): logged by vLLM vs planned")
        engine = Table()
        for column in ("component", "logged", "planned", "plan error"):
            engine.add_column(column, justify="left" if column == "component" else "right")
        for engine_row in rows:
            engine.add_row(*engine_row)
        console.print(engine)
