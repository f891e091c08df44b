"""Code that runs inside vLLM's workers: how a reloaded policy becomes the one vLLM computes with.

vLLM's reload_weights() reloads a model layer by layer and re-runs each layer's weight processing. On vLLM's CPU
build (0.31) one layer escapes it: an LM head tied to the embedding has no weights of its own in the checkpoint, so
it is never reloaded, and the oneDNN GEMM handle its CPU kernel built at start-up keeps the old embedding. The
logits then come from the old weights while everything else is new (measured: the served log-probs stay 1.2 nats
off). refresh_cpu_kernels() rebuilds that handle from the head's current weight, as vLLM built it at load time.

FilesystemSync is the worker extension a `vllm serve` server runs with (`--worker-extension-cls`, placement.py) for
vllm.weight_sync=filesystem: the server's side of training/weight_sync.py, called through /collective_rpc.
"""

from typing import Any


def refresh_cpu_kernels(model) -> None:
    """On vLLM's CPU platform, rebuild the LM head's GEMM handle from its weight (a no-op elsewhere)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    head = getattr(model, "lm_head", None)
    if head is not None and hasattr(head, "cpu_linear") and head.weight.numel():
        dispatch_cpu_unquantized_gemm(head, remove_weight=False)


class FilesystemSync:
    """Mixed into each vLLM worker by `--worker-extension-cls grpo_exp.training.vllm_worker.FilesystemSync`."""

    model_runner: Any  # the vLLM worker's, which this class is mixed into

    def reload_policy(self, weights_path: str) -> None:
        """Reload the weights rank 0 wrote to `weights_path` (safetensors, checkpoint names)."""
        self.model_runner.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        refresh_cpu_kernels(self.model_runner.get_model())
