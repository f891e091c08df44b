"""TRL's GRPOTrainer with every phase of a GRPO step measured: the one module that relies on TRL's internals.

`MeasuredGRPOTrainer` overrides the GRPOTrainer methods each phase runs in (PHASE_HOOKS) and calls TRL's
own through super() inside a phases.PhaseMemory phase; its `log()` gathers every rank's window at each
logging step and adds `memory/<phase>/<stat>_gib` before TRL's callbacks (metrics.jsonl, W&B) see the
logs. The optimizer step is bracketed by a callback (under DeepSpeed it runs inside backward: `train`);
weight sync to vLLM by a thin wrapper around TRL's VLLMGeneration. A trl upgrade that renames one of
these methods is found by missing_hooks() before any run (a test asks the installed trl).
"""

import time

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from grpo_exp.training.phases import PhaseMemory, aggregate, gather, run_peaks

# The GRPOTrainer methods (trl 1.16) each phase is measured around. training_step is forward + backward
# (generation runs inside it, through _prepare_inputs); _get_per_token_logps_and_entropies is scoring
# without gradients (old/reference log-probs) and part of training with them.
PHASE_HOOKS = {
    "training_step": "train",
    "_prepare_inputs": "generate",  # generation-batch bookkeeping around the phases below
    "_generate": "generate",
    "_calculate_rewards": "reward",
    "_get_per_token_logps_and_entropies": "score or train",
}


def missing_hooks(trainer_class=GRPOTrainer) -> list[str]:
    """The PHASE_HOOKS methods the installed trl's GRPOTrainer lacks (a renamed private method)."""
    return [name for name in PHASE_HOOKS if not callable(getattr(trainer_class, name, None))]


class MeasuredGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose steps are measured into `phases`; `run_peaks` accumulates the whole run's maxima."""

    def __init__(self, *args, phases: PhaseMemory, **kwargs):
        self.phases = phases
        self.run_peaks: dict[str, float] = {}
        super().__init__(*args, **kwargs)
        self.add_callback(_OptimizerPhase(phases))
        if getattr(self, "vllm_generation", None) is not None:
            self.vllm_generation = _MeasuredWeightSync(self.vllm_generation, phases)

    def training_step(self, *args, **kwargs):
        with self.phases.phase("train"):
            return super().training_step(*args, **kwargs)

    def _prepare_inputs(self, *args, **kwargs):
        with self.phases.phase("generate"):
            return super()._prepare_inputs(*args, **kwargs)

    def _generate(self, *args, **kwargs):
        with self.phases.phase("generate"):
            return super()._generate(*args, **kwargs)

    def _calculate_rewards(self, *args, **kwargs):
        with self.phases.phase("reward"):
            return super()._calculate_rewards(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        with self.phases.phase("train" if torch.is_grad_enabled() else "score"):
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    def log(self, logs: dict, *args, **kwargs):
        # Called on every rank at each logging step (Trainer gathers the loss just before), so the gather
        # is safe; callbacks (metrics.jsonl, W&B) then see memory/* with the rest.
        started = time.perf_counter()
        memory = aggregate(gather(self.phases.take_window()))
        logs.update(memory)
        run_peaks(memory, self.run_peaks)
        self.phases.overhead_s += time.perf_counter() - started
        return super().log(logs, *args, **kwargs)


class _OptimizerPhase(TrainerCallback):
    def __init__(self, phases: PhaseMemory):
        self.phases = phases

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.phases.enter("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.phases.exit("optimizer")


class _MeasuredWeightSync:
    """TRL's VLLMGeneration, its sync_weights() measured as the weight_sync phase; everything else passes
    through to it."""

    def __init__(self, generation, phases: PhaseMemory):
        self._generation, self._phases = generation, phases

    def sync_weights(self, *args, **kwargs):
        with self._phases.phase("weight_sync"):
            return self._generation.sync_weights(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._generation, name)
