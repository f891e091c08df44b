"""TRL's GRPOTrainer with every phase of a GRPO step measured: the one module that relies on TRL's internals.

`MeasuredGRPOTrainer` overrides the GRPOTrainer methods each phase runs in (PHASE_HOOKS) and calls TRL's
own through super() inside a phases.PhaseMemory phase; its `log()` gathers every rank's window at each
logging step and adds `memory/<phase>/<stat>_gib` before TRL's callbacks (metrics.jsonl, W&B) see the
logs. The optimizer step is bracketed by a callback (under DeepSpeed it runs inside backward: `train`);
weight sync to vLLM by a thin wrapper around TRL's VLLMGeneration. A trl upgrade that renames one of
these methods is found by missing_hooks() before any run (a test asks the installed trl). FSDP2 on CPU ranks
needs accelerate's device gate opened (create_accelerator_and_postprocess says why).

An agentic run's episode: TRL's tool loop (tool calls and the bookkeeping between rounds) is the `tools`
phase, each generation round inside it `generate`; environment resets are `tools` too (each instance's
reset, wrapped as the factory builds it). Without telemetry (phases=None) nothing is measured; either way
the trainer counts the tool results TRL drops for want of room in the episode (tools/dropped_result_frequency).
"""

import logging
import time
from contextlib import nullcontext
from typing import Any
from unittest import mock

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer import grpo_trainer

from grpo_exp.core import metrics
from grpo_exp.training.episodes import dropped_results, measured_resets
from grpo_exp.training.phases import PhaseMemory, aggregate, gather, run_peaks, this_node

log = logging.getLogger(__name__)

# The GRPOTrainer methods (trl 1.16) each phase is measured around. training_step is forward + backward
# (generation runs inside it, through _prepare_inputs); _get_per_token_logps_and_entropies is scoring
# without gradients (old/reference log-probs) and part of training with them.
PHASE_HOOKS = {
    "training_step": "train",
    "_prepare_inputs": "generate",  # generation-batch bookkeeping around the phases below
    "_generate": "generate",
    "_calculate_rewards": "reward",
    "_get_per_token_logps_and_entropies": "score or train",
    "_tool_call_loop": "tools",  # tool calls between an episode's generation rounds
    "_generate_single_turn": "generate",  # a generation round, also inside the tool loop
}


def missing_hooks(trainer_class=GRPOTrainer) -> list[str]:
    """The PHASE_HOOKS methods the installed trl's GRPOTrainer lacks (a renamed private method)."""
    return [name for name in PHASE_HOOKS if not callable(getattr(trainer_class, name, None))]


class MeasuredGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose steps are measured into `phases` (None: not measured); `run_peaks` accumulates the
    whole run's maxima."""

    vllm_generation: Any  # GRPOTrainer's (None without vLLM): wrapped to measure its weight syncs

    def __init__(self, *args, phases: PhaseMemory | None, environment_factory=None, generation_class=None, **kwargs):
        """`generation_class`: the VLLMGeneration GRPOTrainer builds (weight_sync.py's for vllm.weight_sync=
        filesystem; None: TRL's own)."""
        self.phases = phases
        self.run_peaks: dict[str, float] = {}
        if phases is not None and environment_factory is not None:
            environment_factory = measured_resets(environment_factory, phases)
        # GRPOTrainer.__init__ builds its VLLMGeneration by the name its module imported: swapped for the call only
        with mock.patch.object(grpo_trainer, "VLLMGeneration", generation_class or grpo_trainer.VLLMGeneration):
            super().__init__(*args, environment_factory=environment_factory, **kwargs)
        if phases is None:
            return
        self.add_callback(_OptimizerPhase(phases))
        if getattr(self, "vllm_generation", None) is not None:
            self.vllm_generation = _MeasuredWeightSync(self.vllm_generation, phases)

    def create_accelerator_and_postprocess(self):
        """FSDP2 on CPU ranks. accelerate turns a run into DistributedType.FSDP only for accelerator devices
        (AcceleratorState: MULTI_GPU, MULTI_XPU, ...); on CPU ranks it is MULTI_CPU, and the fsdp_plugin
        transformers built from GRPOConfig.fsdp_config is silently dropped: the run trains as DDP. torch's
        fully_shard runs on CPU over gloo, so the same plugin is switched on here, in both of accelerate's
        shared states (prepare() reads one, gathers the other). On GPUs nothing changes."""
        super().create_accelerator_and_postprocess()
        from accelerate.state import PartialState
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

        state = self.accelerator.state
        if state.distributed_type == DistributedType.MULTI_CPU and self.args.fsdp_plugin_args:
            state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
            state.distributed_type = PartialState().distributed_type = DistributedType.FSDP
            self.is_fsdp_enabled = True

    def _phase(self, name: str):
        return self.phases.phase(name) if self.phases is not None else nullcontext()

    def training_step(self, *args, **kwargs):
        with self._phase("train"):
            return super().training_step(*args, **kwargs)

    def _prepare_inputs(self, *args, **kwargs):
        with self._phase("generate"):
            return super()._prepare_inputs(*args, **kwargs)

    def _generate(self, *args, **kwargs):
        with self._phase("generate"):
            return super()._generate(*args, **kwargs)

    def _generate_single_turn(self, *args, **kwargs):
        with self._phase("generate"):
            return super()._generate_single_turn(*args, **kwargs)

    def _tool_call_loop(self, *args, **kwargs):
        with self._phase("tools"):
            result = super()._tool_call_loop(*args, **kwargs)
        self._count_dropped(result[1])  # its gather waits for the other ranks: generate's time, not tools'
        return result

    def _count_dropped(self, episodes: list[list[dict]]) -> None:
        """tools/dropped_result_frequency beside TRL's tools/* metrics: the share of episodes TRL ended at a tool
        call whose result did not fit the episode; each rank's drops in train.log. A collective: every rank runs
        the tool loop when the run has tools."""
        dropped = dropped_results(episodes, self.max_tool_calling_iterations)
        if dropped:
            log.info(
                "tools: %d of %d episodes ended at a tool call whose result did not fit the episode "
                "(trainer.max_completion_length=%d bounds every turn and tool result): TRL dropped the result",
                dropped,
                len(episodes),
                self.max_completion_length,
            )
        counts = self.accelerator.gather(torch.tensor([dropped, len(episodes)], device=self.accelerator.device))
        counts = counts.view(-1, 2).sum(dim=0).tolist()
        mode = "train" if self.model.training else "eval"
        self._metrics[mode][metrics.TOOL_DROPPED].append(counts[0] / max(counts[1], 1))

    def _calculate_rewards(self, *args, **kwargs):
        with self._phase("reward"):
            return super()._calculate_rewards(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        with self._phase("train" if torch.is_grad_enabled() else "score"):
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    def log(self, logs: dict, *args, **kwargs):
        # Called on every rank at each logging step (Trainer gathers the loss just before), so the gather
        # is safe; callbacks (metrics.jsonl, W&B) then see memory/* with the rest.
        if self.phases is not None:
            started = time.perf_counter()
            memory = aggregate(*gather(self.phases.take_window(), this_node()))
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
