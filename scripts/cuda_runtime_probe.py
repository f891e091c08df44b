"""What a GPU process holds besides its tensors, measured stage by stage on the card this runs on: the planner's
`runtime` term (planning/cuda_runtime.py) and the sources of its figures. Each stage runs in a fresh process and
reports NVML's device memory used less the caching allocator's reserve, over what the card held before the process
touched CUDA:

  context   the CUDA context alone (one tiny tensor)
  cublas    + a bf16 and an fp32 matrix product (cuBLAS / cuBLASLt handles and workspaces)
  train     + a small transformers model's bf16 forward, backward and AdamW step (the kernels a training step loads)
  stack_2k  context with the per-thread stack raised from 1 to 2 KiB: the driver reserves the stack for every thread
            the card can hold at once, so the step is SMs x threads per SM x 1 KiB
  eager     train under CUDA_MODULE_LOADING=EAGER: every kernel of every library loaded, as before CUDA 11.7
  nccl      train + a one-rank NCCL process group and one all-reduce

    python scripts/cuda_runtime_probe.py out.json      # on a GPU machine; without CUDA it says so and exits 0
"""

import json
import os
import subprocess
import sys

GIB = 2**30
STAGES = ("context", "cublas", "train", "stack_2k", "eager", "nccl")


def _device_used() -> int:
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used


def _train_step(torch) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
        vocab_size=4096,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config).to("cuda", torch.bfloat16)
    ids = torch.randint(0, 4096, (4, 128), device="cuda")
    model(input_ids=ids, labels=ids).loss.backward()
    torch.optim.AdamW(model.parameters(), lr=1e-5).step()


def _stage(name: str) -> dict:
    """One stage in this process: the bytes it added to the device beyond the allocator's reserve."""
    import torch

    before = _device_used()
    torch.zeros(1, device="cuda")
    if name == "stack_2k":
        import ctypes

        torch.cuda.synchronize()
        for lib in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):  # torch's own, already loaded
            try:
                cudart = ctypes.CDLL(lib)
                break
            except OSError:
                continue
        assert cudart.cudaDeviceSetLimit(0, 2048) == 0  # cudaLimitStackSize, bytes per thread
    if name in ("cublas", "train", "eager", "nccl"):
        for dtype in (torch.bfloat16, torch.float32):
            a = torch.randn(1024, 1024, device="cuda", dtype=dtype)
            (a @ a).sum().item()
    if name in ("train", "eager", "nccl"):
        _train_step(torch)
    if name == "nccl":
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
        dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
    torch.cuda.synchronize()
    used = _device_used() - before
    reserved = torch.cuda.memory_reserved()
    return {"nvml_gib": used / GIB, "reserved_gib": reserved / GIB, "runtime_gib": (used - reserved) / GIB}


def _card() -> dict:
    import pynvml
    import torch

    p = torch.cuda.get_device_properties(0)
    pynvml.nvmlInit()
    return {
        "name": torch.cuda.get_device_name(0),
        "memory_gib": p.total_memory / GIB,
        "sms": p.multi_processor_count,
        "threads_per_sm": p.max_threads_per_multi_processor,
        "capability": f"{p.major}.{p.minor}",
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
    }


def main(out: str) -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing measured")
        return 0
    record = {"card": _card(), "stages": {}}
    for name in STAGES:
        env = dict(os.environ, CUDA_MODULE_LOADING="EAGER" if name == "eager" else "LAZY")
        done = subprocess.run(
            [sys.executable, __file__, "--stage", name], env=env, capture_output=True, text=True, timeout=120
        )
        lines = done.stdout.strip().splitlines()
        record["stages"][name] = (
            json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.stderr[-800:]}
        )
        print(name, record["stages"][name], flush=True)
    c = record["card"]
    record["stack_per_kib_predicted_gib"] = c["sms"] * c["threads_per_sm"] * 1024 / GIB
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--stage":
        print(json.dumps(_stage(sys.argv[2])))
    else:
        sys.exit(main(sys.argv[1]))
