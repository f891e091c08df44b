"""vLLM's own start-up figures, read from its log lines: what the engine loaded, profiled and left for the KV
cache, as vLLM measured it. A server's output reaches train.log as `[vllm] ...`, a colocated engine's through
its rank; the driver adds the figures to summary.json (core/outcome.py), the run report sets them beside the
plan, and `grpo-exp calibrate` fits the engine's overhead factor from them.

The wording moved between versions; each figure has every form seen in public logs (tests/fixtures/
vllm_startup_logs.yaml holds them, verbatim, with their sources):

    V0, 0.6-0.8   the current vLLM instance can use total_gpu_memory (79.14GiB) x gpu_memory_utilization (0.90)
                  = 71.22GiB; model weights take 14.99GiB; non_torch_memory takes 0.12GiB; PyTorch activation
                  peak memory takes 1.19GiB; the rest of the memory reserved for KV Cache is 54.93GiB.
    V1            Model loading took 14.29 GiB memory ...; Available KV cache memory: 26.32 GiB;
                  GPU KV cache size: 492,912 tokens; Maximum concurrency for 4,096 tokens per request: 120.34x
    >= 0.21       Estimated CUDA graph memory: 0.37 GiB total; CUDA graph pool memory: 0.31 GiB (actual) ...
    all           Graph capturing finished in 4 secs, took 0.31 GiB
    CPU build     Explicitly set (1.0/10.71) GiB for KV cache on node 0.  (VLLM_CPU_KVCACHE_SPACE / the node's RAM)
                  CPU KV cache size: 4,194,304 tokens, Maximum concurrency for 512 tokens per request: 8192.00x

Per figure the largest value over the lines found (TP workers and colocated ranks print one each; memory is
planned by its maximum). GiB = 2**30 bytes, as vLLM prints them ("GB" in older lines is GiB too).
"""

import re

from grpo_exp.core import metrics

_NUMBER = r"(-?[\d,]*\.?\d+)"
# figure -> the patterns that carry it (the first group is its value)
PATTERNS = {
    "total_gib": [r"total_gpu_memory \(" + _NUMBER + r" ?GiB\)"],
    "gpu_memory_utilization": [
        r"x gpu_memory_utilization \(" + _NUMBER + r"\)",
        r"current --gpu-memory-utilization=" + _NUMBER,
    ],
    "weights_gib": [
        r"model weights take " + _NUMBER + r" ?GiB",
        r"Model loading took " + _NUMBER + r" ?Gi?B",
        r"Loading model weights took " + _NUMBER + r" ?Gi?B",
    ],
    "non_torch_gib": [r"non_torch_memory takes " + _NUMBER + r" ?GiB"],
    "profile_activations_gib": [r"PyTorch activation peak memory takes " + _NUMBER + r" ?GiB"],
    "kv_cache_gib": [
        r"Available KV cache memory: " + _NUMBER + r" ?GiB",
        r"the rest of the memory reserved for KV Cache is " + _NUMBER + r" ?GiB",
        r"Explicitly set \(" + _NUMBER + r"/[\d.]+\) GiB for KV cache",
    ],
    "cuda_graphs_gib": [
        r"Estimated CUDA graph memory: " + _NUMBER + r" ?GiB",
        r"CUDA graph pool memory: " + _NUMBER + r" ?GiB \(actual\)",
        r"Graph capturing finished in [\d.]+ secs?, took " + _NUMBER + r" ?GiB",
    ],
    "kv_tokens": [r"[GC]PU KV cache size: " + _NUMBER + r" tokens"],
    "max_concurrency": [r"Maximum concurrency for [\d,]+ tokens per request: " + _NUMBER + r"x"],
    "max_model_len": [r"Maximum concurrency for " + _NUMBER + r" tokens per request"],
}
_VERSION = [r"Initializing an? V?[01]? ?LLM engine \(v([\w.+-]+)\)", r"vLLM API server version ([\w.+-]+)"]


def parse(text: str) -> dict:
    """Every start-up figure found in `text` (numbers), and `version` when a line names it. The first pattern
    of a figure that matches anywhere wins (estimated graph memory before the captured amount)."""
    found: dict = {}
    for figure, patterns in PATTERNS.items():
        for pattern in patterns:
            values = [float(v.replace(",", "")) for v in re.findall(pattern, text)]
            if values:
                found[figure] = max(values)
                break
    for pattern in _VERSION:
        match = re.search(pattern, text)
        if match:
            found["version"] = match.group(1)
            break
    return found


def summary_keys(text: str) -> dict:
    """The figures of `text` as summary.json keys (memory/vllm/startup/<figure>); {} when vLLM logged none."""
    figures = parse(text)
    if not any(k.endswith("_gib") or k == "kv_tokens" for k in figures):
        return {}
    return {metrics.vllm_startup(k): v for k, v in figures.items()}
