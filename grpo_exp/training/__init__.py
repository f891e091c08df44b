"""Stage 4, one training process: builds model, data, rewards and trl.GRPOTrainer from the frozen
config.yaml, measures memory per phase, and logs to W&B."""
