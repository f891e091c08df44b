"""How the policy's weights reach vLLM where TRL's own path cannot run: through vLLM's reload_weights.

vllm.weight_sync=filesystem: a `vllm serve` server gets them through files, not NCCL.

TRL 1.16 pushes weights to a server over vLLM's NCCL weight-transfer engine, which needs CUDA on both ends
(trl's init_communicator refuses any other device). Trainers and servers that share storage but no NCCL network,
and every CPU run, sync through a directory instead, the way prime-rl does by default:

    every rank   walks the parameters with TRL's own iterator (ZeRO-3 gathers and FSDP's full tensors are
                 collectives; LoRA adapters merged as TRL merges them, under vLLM's names)
    rank 0       writes them as safetensors shards (huggingface_hub's save_torch_state_dict: an index beside
                 them when they take more than one shard) into vllm.weight_sync_dir
    the server   reloads from that directory: vLLM's reload_weights(weights_path=...) in the worker extension it
                 runs with (vllm_worker.FilesystemSync, the way prime-rl adds its own), called through vLLM's dev
                 endpoint /collective_rpc (VLLM_SERVER_DEV_MODE=1, which TRL's server runs with); then its prefix
                 cache is reset, as after TRL's NCCL sync

A colocated engine on CPU: TRL pushes each tensor into the engine's model.load_weights(), which vLLM's CPU build
cannot take once it has repacked its linear layers for its CPU kernels ("'Parameter' object has no attribute
'weight_loader'"). vLLM's reload_weights() (layerwise: materialize, load, process, copy into the kernel's storage)
takes the same tensors in process, straight from TRL's iterator (and vllm_worker.refresh_cpu_kernels the tied LM
head it leaves stale).

Everything else (generation, the colocated engine on GPUs, NCCL sync) is TRL's VLLMGeneration unchanged.
"""

import logging
import shutil
import time
from pathlib import Path

from trl.generation.vllm_client import VLLMClient
from trl.generation.vllm_generation import VLLMGeneration

from grpo_exp.training.vllm_worker import refresh_cpu_kernels

log = logging.getLogger(__name__)

# Shards vLLM reads one at a time: bounds the server's transient memory during a reload of a large model.
MAX_SHARD_SIZE = "5GB"


class ReloadingGeneration(VLLMGeneration):
    """TRL's VLLMGeneration whose sync_weights() goes through vLLM's reload_weights: a server's from `sync_dir`
    (and no NCCL communicator), a colocated engine's in process."""

    sync_dir: Path | None  # set by generation_class(); None: a colocated engine

    def _init_vllm(self):
        if self.mode != "server":
            return super()._init_vllm()
        if self.accelerator.is_main_process:  # TRL's client, minus init_communicator (NCCL, CUDA only)
            self.vllm_client = VLLMClient(
                base_url=self.server_base_url or f"http://{self.server_host}:{self.server_port}",
                group_port=self.group_port,
                connection_timeout=self.server_timeout,
            )
        self.accelerator.wait_for_everyone()

    def sync_weights(self):
        if self.mode == "colocate":
            runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
            runner.reload_weights(weights_iterator=self._iter_named_params(), is_checkpoint_format=True)
            refresh_cpu_kernels(runner.get_model())
            self.llm.reset_prefix_cache()
            return
        main = self.accelerator.is_main_process
        state = {}
        for name, tensor in self._iter_named_params():  # every rank: gathering is a collective
            if main:  # a copy: a ZeRO-3 gather frees its tensor when the iterator moves on
                state[name] = tensor.detach().to("cpu", copy=True).contiguous()
        if not main:
            return
        started = time.perf_counter()
        written = write_weights(state, self.sync_dir)
        reload_from(self.vllm_client, self.sync_dir)
        self.vllm_client.reset_prefix_cache()
        log.info(
            "weight sync: %.1f MiB written to %s and reloaded by the server in %.2fs",
            written / 2**20,
            self.sync_dir,
            time.perf_counter() - started,
        )


def write_weights(state: dict, directory: Path) -> int:
    """`state` as safetensors shards in `directory` (the last sync's files replaced); returns the bytes written."""
    from huggingface_hub import save_torch_state_dict

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    save_torch_state_dict(state, directory, max_shard_size=MAX_SHARD_SIZE, safe_serialization=True)
    return sum(f.stat().st_size for f in directory.glob("*.safetensors"))


def reload_from(client: VLLMClient, directory: Path) -> None:
    """The server's workers reload their weights from `directory` (vllm_worker.FilesystemSync.reload_policy)."""
    client._post(
        f"{client.base_url}/collective_rpc",
        json={"method": "reload_policy", "kwargs": {"weights_path": str(directory)}},
    )


def generation_class(sync_dir: Path | None) -> type:
    """The VLLMGeneration GRPOTrainer builds for this run, bound to its sync directory (None: colocated)."""
    return type("ReloadingGeneration", (ReloadingGeneration,), {"sync_dir": sync_dir and Path(sync_dir)})
