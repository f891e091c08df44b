#!/usr/bin/env bash
# The GPU lane: what grpo_exp can only learn on a real GPU. In order (a lease may end before the last step, so the
# records no fixture holds yet come first):
#   probe    scripts/cuda_runtime_probe.py: the CUDA runtime term's parts on this card (cuda-runtime.json)
#   g_, h_   a mixture of experts trained on the card, per experts backend (issue 50's record)
#   pytest   every CUDA path of grpo_exp (pytest -m gpu: NVML and allocator stats, card detection, OOM capture,
#            DeepSpeed over NCCL on one rank, on_oom=fit)
#   a_ .. f_ the H200 records' cases (tests/fixtures/gpu/h200-2026-11-26) at the trainer shape they were recorded with
# Run on a GPU machine from the project root, after ../shared/gpu/run.sh's setup (its PYTHONPATH holds the wheels);
# CPU-only, the probe and the pytest part say why they measure nothing and the cases are not run.
#   OUT=/tmp/gpu-out ONLY="probe g_moe_full" BUDGET=480 bash scripts/gpu_lane.sh
# writes gpu-lane.txt, cuda-runtime.json and runs.tgz (each case's run dir and console) under $OUT, the archive again
# after every case, so a lease that ends early still returns what ran.
set -u
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
RUNS=${RUNS:-/tmp/gpu-lane-runs}; mkdir -p "$RUNS"   # outside $OUT: a device returns only a few files
BUDGET=${BUDGET:-100000}  # seconds; a step that would start later than BUDGET - 60 is skipped and says so
T0=$(date +%s)
export HF_HUB_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
wanted() {  # step name: in ONLY (when set) and inside the budget
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $1 "* ]]; then return 1; fi
  local at=$(( $(date +%s) - T0 ))
  if [ $(( at + 60 )) -gt "$BUDGET" ]; then echo "== $1 skipped at $at s: over BUDGET=$BUDGET"; return 1; fi
}
keep() { tar czf "$OUT/runs.tgz" -C "$RUNS" --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' . 2>/dev/null; }
wanted probe && $PY scripts/cuda_runtime_probe.py "$OUT/cuda-runtime.json" 2>&1 | tail -8
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; CUDA=$?
case_() {  # name timeout overrides...
  local name=$1 to=$2; shift 2
  [ $CUDA = 0 ] || return 0
  wanted "$name" || return 0
  local t=$(date +%s); local left=$(( BUDGET - t + T0 )); [ "$left" -lt "$to" ] && to=$left  # ends inside BUDGET
  timeout "$to" $PY -m grpo_exp hydra.run.dir="$RUNS/$name" $COMMON "$@" > "$RUNS/$name.console" 2>&1
  echo "== $name exit $? in $(( $(date +%s) - t )) s"; tail -12 "$RUNS/$name.console" | cut -c1-200
  keep
}
COMMON="topology=local vllm=off logger=none trainer.max_steps=2 trainer.save_strategy=no trainer.activation_checkpointing=false"
# A mixture of experts: Qwen3-30B-A3B's layers (128 experts of width 768, 8 active), 4 of them, random weights
# (3.1B parameters: full fine-tuning fits one H100/H200), with transformers' default grouped_mm experts and eager.
MOE="model=qwen3-30b-a3b model.name_or_path=null model.num_hidden_layers=4 model.num_parameters=3114814464"
MOE_SIZE="trainer.per_device_train_batch_size=8 trainer.num_generations=8 trainer.max_completion_length=256"
case_ g_moe_full 200 $MOE $MOE_SIZE
case_ h_moe_eager 200 $MOE $MOE_SIZE model.experts_implementation=eager
# The files holding `gpu` tests (the rest may import what a GPU image lacks: W&B, submitit); -p no:cacheprovider:
# the project tree may be read-only where the kit carries it
GPU_TESTS=$(grep -rl --include='test_*.py' -e 'mark\.gpu' tests)
wanted pytest && $PY -m pytest -m gpu -q -p no:cacheprovider -o addopts="" --continue-on-collection-errors \
  $GPU_TESTS 2>&1 | tee "$OUT/gpu-lane.txt" | tail -15
# The H200 records' cases: random weights of the real shapes, checkpointing off as recorded (TRL's default is on).
M05="model=qwen0.5b model.name_or_path=null"; M15="model=qwen1.5b model.name_or_path=null"
SIZE="trainer.per_device_train_batch_size=16 trainer.num_generations=8 trainer.max_completion_length=512"
BIG="trainer.per_device_train_batch_size=64 trainer.num_generations=8 trainer.max_completion_length=1024"
case_ a_q05_full 150 $M05 $SIZE
case_ d_q15_oom_warn 130 $M15 $BIG preflight.on_oom=warn
case_ e_q15_oom_fit 160 $M15 $BIG preflight.on_oom=fit
case_ f_q05_zero2 130 $M05 deepspeed=zero2 $SIZE
case_ c_q15_full_ckpt 110 $M15 $SIZE trainer.activation_checkpointing=true
case_ b_q15_lora 110 $M15 peft=lora $SIZE
echo "== lane done at $(( $(date +%s) - T0 )) s"
