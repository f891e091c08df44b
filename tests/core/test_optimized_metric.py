"""optimized_metric: what a sweep optimizes (the Optuna sweeper's objective, the frontier's best trial), tokens/s
unless the config names another: peak memory, reward, or any key a run's summary.json records."""

import pytest

from grpo_exp.core import metrics, rundir
from grpo_exp.launching.job import Ended
from hydra_plugins.grpo_exp_frontier.frontier_sweeper import _best
from tests.helpers import problem_keys, problems

SUMMARY = {
    metrics.TOKENS_PER_S: 812.0,
    metrics.peak("train", "host_rss_max"): 1.5,
    metrics.peak("train", "device_used_max"): 30.25,
    "final_metrics": {"reward": 0.75, "entropy": 2.0},
}


@pytest.mark.parametrize(
    ("metric", "value", "direction"),
    [
        ("tokens_per_s", 812.0, "maximize"),
        ("peak_memory", 30.25, "minimize"),  # NVML's device peak before the host RSS
        ("reward", 0.75, "maximize"),
        ("entropy", 2.0, "maximize"),
        (metrics.peak("train", "host_rss_max"), 1.5, "minimize"),
    ],
)
def test_a_metric_is_read_from_the_summary_in_its_direction(metric, value, direction):
    assert rundir.optimized(SUMMARY, metric) == value and rundir.direction(metric) == direction


def test_a_run_that_did_not_complete_scores_the_worst_in_the_direction():
    assert Ended(0, None, SUMMARY).objective("tokens_per_s") == 812.0
    assert Ended(0, None, SUMMARY).objective("peak_memory", "minimize") == 30.25
    oom = Ended(4, None, SUMMARY)
    assert oom.objective("tokens_per_s", "maximize") == float("-inf")
    assert oom.objective("peak_memory", "minimize") == float("inf")
    assert Ended(0, None, {}).objective("reward") == float("-inf")  # nothing measured: no better than a failure
    # a completed trial of a metric below zero still beats one that did not complete
    negative = {**SUMMARY, "reward": -1.0}
    assert Ended(0, None, negative).objective("reward") > Ended(2, None, negative).objective("reward")


def test_the_frontiers_best_trial_is_by_the_metric():
    trials = [
        {"fits": True, "metric": 900.0, "batch": 8},
        {"fits": True, "metric": 1200.0, "batch": 16},
        {"fits": False, "metric": None, "batch": 32},
    ]
    assert _best(trials, "tokens_per_s")["best"]["batch"] == 16
    assert _best(trials, "peak_memory")["best"]["batch"] == 8
    assert _best([], "reward") == {"optimized_metric": "reward", "best": None}


def test_a_name_no_run_records_is_refused():
    assert problem_keys(problems("optimized_metric=tokens")) == ["optimized_metric"]
    assert problems("optimized_metric=peak_memory") == []
    assert problems("optimized_metric=memory/peak/train/host_rss_max_gib") == []
