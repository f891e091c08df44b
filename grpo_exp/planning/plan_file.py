"""plan.json, written and read here only: the launch plan (placement.Plan: who runs where, the commands)
and the memory plan (planner.memory_plan) of one run, as the driver made them before launch.

    world_size, device, gpus_per_node, nodes[]        the launch plan
    vllm                                              the placement's vllm block with the engine's memory plan
    fits, train, errors, suggestions, notes, ...      the memory plan
    host                                              host RAM per kind of node (host_memory.py)
    vllm_engine                                       one vLLM engine GPU, as vllm_engine.py lays it out

Readers: the worker (the plan beside what it measured: summary_keys), calibration (the GPUs it planned for).
"""

from pathlib import Path

from grpo_exp.core import metrics, rundir


def write(run_dir: Path, plan, memory) -> dict:
    """plan.json for `plan` (placement.Plan) and `memory` (planner.MemoryPlan); returns what it wrote."""
    data = {**plan.to_dict(), **memory.to_dict(), "vllm": {**plan.vllm, **(memory.vllm or {})}}
    rundir.write_json(Path(run_dir) / rundir.PLAN, data)
    return data


def read(run_dir: Path) -> dict:
    """plan.json of `run_dir`, or {} where none was written."""
    return rundir.read_json(Path(run_dir) / rundir.PLAN)


def summary_keys(memory: dict) -> dict:
    """The memory plan's figures as summary keys: plan/<role>/peak_gib, .../<component>_gib, .../phases/<phase>_gib."""
    out = {}
    for role in ("train", "vllm"):
        r = memory.get(role)
        if r and r.get("peak_gib") is not None:  # plan.json's vllm holds the placement even without an engine
            out[metrics.plan_peak(role)] = r["peak_gib"]
            out[metrics.plan_capacity(role)] = r["capacity_gib"]
            out.update({metrics.plan_component(role, k): v for k, v in r["components_gib"].items()})
            out.update({metrics.plan_phase(role, k): v for k, v in r["phases_gib"].items()})
    hosts = memory.get("host") or []
    if hosts:  # the node with the most host RAM planned: plan/host/peak_gib, .../<component>_gib
        node = max(hosts, key=lambda h: h["peak_gib"])
        out[metrics.plan_peak("host")] = node["peak_gib"]
        out.update({metrics.plan_component("host", k): v for k, v in node["components_gib"].items()})
    engine = memory.get("vllm_engine")
    if engine:
        out.update({metrics.plan_engine(f"{k}_gib"): v for k, v in engine["components_gib"].items()})
        out[metrics.plan_engine("kv_tokens")] = engine["kv_tokens"]
        out[metrics.plan_engine("budget_gib")] = engine["budget_gib"]
    return out
