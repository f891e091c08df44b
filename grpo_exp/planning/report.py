"""The memory plan as terminal tables (rich): per role its peak against capacity, the components and
phases, host RAM per node, the notes and the ranked fixes."""

from grpo_exp.models import model_families
from grpo_exp.planning.inputs import activation_checkpointing, planned_prompt


def print_plan(memory) -> None:
    """The breakdown as terminal tables (rich)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=110)
    roles = {role: r for role in ("train", "vllm") if (r := getattr(memory, role)) is not None}
    for role, r in roles.items():
        verdict = "[green]fits[/]" if r["fits"] else "[red]OOM[/]"
        unit = "GPU" if memory.device == "cuda" else "process (host RAM)"
        console.print(f"{role}: peak per {unit} {r['peak_gib']:.2f} of {r['capacity_gib']:.2f} GiB - {verdict}")
        table = Table()
        table.add_column("component")
        table.add_column("GiB", justify="right")
        for name, gib in r["components_gib"].items():
            if gib:
                table.add_row(name, f"{gib:.2f}")
        table.add_section()
        for name, gib in r["phases_gib"].items():
            table.add_row(f"phase: {name}", f"{gib:.2f}")
        console.print(table)
        for note in r["notes"]:
            console.print(f"  {note}", markup=False, highlight=False)
    for host in memory.host:
        capacity = f" of {host['capacity_gib']:.1f} GiB" if host["capacity_gib"] is not None else " (RAM not given)"
        verdict = "" if host["capacity_gib"] is None else " - [green]fits[/]" if host["fits"] else " - [red]OOM[/]"
        nodes = ",".join(map(str, host["nodes"][:8])) + (" ..." if len(host["nodes"]) > 8 else "")
        parts = ", ".join(f"{k} {v:.1f}" for k, v in host["components_gib"].items() if v)
        console.print(f"host: RAM of node {nodes} {host['peak_gib']:.1f} GiB{capacity}{verdict} ({parts})")
    shown = [note for r in roles.values() for note in r["notes"]]  # an error that repeats one, prefixed or not
    errors = [line for line in memory.errors if not any(line.endswith(note) for note in shown)]
    for line in errors + memory.notes:  # may quote a path or a user's value: text, not markup
        console.print(f"  note: {line}", markup=False, highlight=False)
    if memory.suggestions:
        console.print("what would fit (ranked):")
        for item in memory.suggestions:
            console.print(f"  {'[green]fits [/]' if item['fits'] else 'helps'}  {escape(item['text'])}")


def headline(cfg, plan) -> str:
    """The plan's first line: the model on which cards, and the trainer's shape it is planned at."""

    t = cfg.trainer
    if plan.device == "cuda":
        where = f"{len(plan.nodes)} x {plan.gpus_per_node} {plan.gpu_name or 'GPU'} ({plan.gpu_memory_gib:.2f} GiB"
        where += {"topology": ", the topology's)", "detected": ", detected here)"}.get(plan.card_source, ", assumed)")
    else:
        where = f"{len(plan.nodes)} node(s) x {plan.nodes[0].train_procs} CPU process(es)"
    steps = t.steps_per_generation or t.gradient_accumulation_steps
    prompt = planned_prompt(cfg, plan.device)
    kind = model_families.kind(cfg.model)
    model = f"{cfg.model.name} ({kind})" if kind else cfg.model.name
    return (
        f"{model} on {where}: per-device batch {t.per_device_train_batch_size} x {t.num_generations} "
        f"generations, {prompt} prompt + {t.max_completion_length} completion tokens, activation "
        f"checkpointing {'on' if activation_checkpointing(t) else 'off'}, {steps} step(s) per generation"
    )
