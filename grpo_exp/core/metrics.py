"""Every metric and summary key grpo_exp writes, built here and nowhere else.

Per logging step (metrics.jsonl, W&B):
    memory/<phase>/<stat>_gib          max over ranks; with _mean, _min and _argmax_rank beside it
    memory/<phase>/node_rss_max_gib    host RAM of the fullest node: its ranks' RSS peaks added up
    memory/<counter>                   cumulative allocator counters (alloc_retries, ooms)
Whole run (summary.json):
    memory/peak/<role>/<stat>_gib      role train or vllm
    memory/peak_phase/<phase>/<stat>_gib
    plan/<role>/peak_gib, plan/<role>/<component>_gib, plan/<role>/phases/<phase>_gib, plan/capacity/<role>_gib
    plan/host/peak_gib, plan/host/<component>_gib      host RAM of the node planned to need the most
    plan/vllm_engine/<component>_gib, plan/vllm_engine/kv_tokens   the engine per GPU (server or colocated)
    memory/vllm/startup/<figure>       what vLLM itself logged at start-up (core/vllm_log.py)
    measured/train/<part>_gib, plan_error/train/model_states_pct
    plan_error/train/<phase>_pct, plan_error/train/peak_pct   like with like (rundir.phase_measure), for trackers
    time/<phase>_s, time/<phase>_share, throughput/tokens_per_s, telemetry/overhead_s, telemetry/overhead_share
Agentic runs, per logging step: TRL's tools/call_frequency and tools/failure_frequency, and
tools/dropped_result_frequency (measured_trainer.py).

Pure Python: every stage reads and writes these names.
"""

import re

# What each process's probe reads (training/probes.py): bytes, peaks since the last phase boundary; a CPU
# run has host_rss_max only. Counters are cumulative allocator counts.
BYTE_STATS = ("host_rss_max", "alloc_max", "reserved_max", "active_max", "device_used_max")
COUNT_STATS = ("alloc_retries", "ooms")
NODE_RSS = "node_rss_max"  # beside BYTE_STATS per phase: the fullest node's ranks' host_rss_max added up
VLLM = "vllm"  # the vLLM server's GPUs (server mode), read through NVML by rank 0: a role and a pseudo-phase
RANK_STATS = ("mean", "min", "argmax_rank")  # beside each per-step maximum over ranks
TOKENS_PER_S = "throughput/tokens_per_s"
MODEL_STATES_ERROR = "plan_error/train/model_states_pct"


def plan_error(phase: str) -> str:
    """The planner's error on one phase (or "peak"), in percent of the measured value."""
    return f"plan_error/train/{phase}_pct"


OVERHEAD_S = "telemetry/overhead_s"
OVERHEAD_SHARE = "telemetry/overhead_share"
# TRL's own, logged when the run has tools (env.*): tool calls per episode, and the share of calls that failed.
TOOL_CALLS = "tools/call_frequency"
TOOL_FAILURES = "tools/failure_frequency"
# grpo_exp's, beside them: the share of episodes TRL ended at a tool call whose result did not fit the episode.
TOOL_DROPPED = "tools/dropped_result_frequency"
MEMORY = re.compile(r"memory/([a-z_]+)/(\w+)_gib")  # a per-step memory metric: (phase, stat)


def memory(phase: str, stat: str) -> str:
    return f"memory/{phase}/{stat}_gib"


def across_ranks(key: str, what: str) -> str:
    """The mean, min or argmax_rank of a per-step maximum over ranks."""
    return f"{key}_{what}"


def counter(name: str) -> str:
    return f"memory/{name}"


def peak(role: str, stat: str) -> str:
    return f"memory/peak/{role}/{stat}_gib"


def peak_phase(phase: str, stat: str) -> str:
    return f"memory/peak_phase/{phase}/{stat}_gib"


def plan_peak(role: str) -> str:
    return f"plan/{role}/peak_gib"


def plan_component(role: str, component: str) -> str:
    return f"plan/{role}/{component}_gib"


def plan_capacity(role: str) -> str:
    """The capacity a role was planned against: one GPU's memory (a CPU run's share of the host). Not under
    plan/<role>/, whose keys are the plan's components."""
    return f"plan/capacity/{role}_gib"


def plan_phase(role: str, phase: str) -> str:
    return f"plan/{role}/phases/{phase}_gib"


def vllm_startup(figure: str) -> str:
    """A figure vLLM logged at start-up (core/vllm_log.py): memory/vllm/startup/weights_gib, .../kv_tokens."""
    return f"memory/vllm/startup/{figure}"


def plan_engine(part: str) -> str:
    """The planned vLLM engine per GPU (colocated or server): plan/vllm_engine/<component>_gib, .../kv_tokens."""
    return f"plan/vllm_engine/{part}"


def measured(part: str) -> str:
    return f"measured/train/{part}_gib"


def time_s(phase: str) -> str:
    return f"time/{phase}_s"


def time_share(phase: str) -> str:
    return f"time/{phase}_share"
