"""Stage 5, results: the run dir's layout (its one owner), how a run ended, the run report,
comparison across runs, and W&B dashboards."""
