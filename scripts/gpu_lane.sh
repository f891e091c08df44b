#!/usr/bin/env bash
# The GPU lane: every CUDA path of grpo_exp on one real GPU (pytest -m gpu: NVML and allocator stats, card detection,
# OOM capture, DeepSpeed over NCCL on one rank, on_oom=fit), then the planner's record cases at the trainer shape they
# were recorded with. Run on a GPU machine from the project root, after ../shared/gpu/run.sh's setup (its PYTHONPATH
# holds the wheels); CPU-only, the pytest part skips every test with its reason and the cases are not run.
#   OUT=/tmp/gpu-out bash scripts/gpu_lane.sh      # writes gpu-lane.txt and runs/<case>/ under $OUT
set -u
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT/runs"
export HF_HUB_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# -p no:cacheprovider: the project tree may be read-only where the kit carries it
$PY -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests 2>&1 | tee "$OUT/gpu-lane.txt" | tail -15
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || { echo "no CUDA GPU: the record cases are not run"; exit 0; }
# The H200 records' cases (tests/fixtures/gpu/): random weights of the real shapes, checkpointing as recorded (off:
# TRL's default is on since the trainer shape became TRL's own, so the cases say it).
M05="model=qwen0.5b model.name_or_path=null"; M15="model=qwen1.5b model.name_or_path=null"
SIZE="trainer.per_device_train_batch_size=16 trainer.num_generations=8 trainer.max_completion_length=512"
BIG="trainer.per_device_train_batch_size=64 trainer.num_generations=8 trainer.max_completion_length=1024"
COMMON="topology=local vllm=off logger=none trainer.max_steps=2 trainer.save_strategy=no trainer.activation_checkpointing=false"
case_() {  # name timeout overrides...
  local name=$1 to=$2; shift 2
  timeout "$to" $PY -m grpo_exp hydra.run.dir="$OUT/runs/$name" $COMMON "$@" > "$OUT/runs/$name.console" 2>&1
  echo "== $name exit $?"; tail -12 "$OUT/runs/$name.console" | cut -c1-200
}
case_ a_q05_full 150 $M05 $SIZE
case_ d_q15_oom_warn 130 $M15 $BIG preflight.on_oom=warn
case_ e_q15_oom_fit 160 $M15 $BIG preflight.on_oom=fit
case_ f_q05_zero2 130 $M05 deepspeed=zero2 $SIZE
case_ c_q15_full_ckpt 110 $M15 $SIZE trainer.activation_checkpointing=true
case_ b_q15_lora 110 $M15 peft=lora $SIZE
# A mixture of experts: Qwen3-30B-A3B's layers (128 experts of width 768, 8 active), 4 of them, random weights
# (3.1B parameters: full fine-tuning fits one H100/H200), with transformers' default grouped_mm experts and eager.
MOE="model=qwen3-30b-a3b model.name_or_path=null model.num_hidden_layers=4 model.num_parameters=3114814464"
MOE_SIZE="trainer.per_device_train_batch_size=8 trainer.num_generations=8 trainer.max_completion_length=256"
case_ g_moe_full 200 $MOE $MOE_SIZE
case_ h_moe_eager 200 $MOE $MOE_SIZE model.experts_implementation=eager
