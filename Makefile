# One command per check, the same on a laptop and in CI.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch 2.13.0 is the CPU build that lies on the CI machines' disk; tests that need it skip
# without it.
TORCH   ?= torch==2.13.0
# DeepSpeed (tests/process/test_deepspeed.py) builds from source against the torch above: no
# build isolation (pip would build it against a torch of its own choosing), none of its C++
# ops but the CPU shared-memory one, which its CPU path loads in every process. The line
# after the install loads that op once, so a machine whose wheel lacks it (a cached build)
# compiles it here, a minute or two once, and never in a test.
DEEPSPEED ?= deepspeed==0.19.8

.PHONY: demo test test-fast pythons lint bench clean

# An editable install byte-compiles nothing (a wheel's install does): compile once here, or
# where PYTHONDONTWRITEBYTECODE is set every process (each worker, each rank) compiles the
# modules it imports anew.
$(BIN)/shoal: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	$(BIN)/python -m compileall -q src/shoal
	@touch $@

$(VENV)/.dev: pyproject.toml $(BIN)/shoal
	$(BIN)/pip install -q -e '.[dev]' '$(TORCH)'
	$(BIN)/pip install -q setuptools wheel
	DS_BUILD_OPS=0 DS_BUILD_SHM_COMM=1 DS_ACCELERATOR=cpu \
		$(BIN)/pip install -q --no-build-isolation '$(DEEPSPEED)' '$(TORCH)'
	DS_ACCELERATOR=cpu $(BIN)/python -c 'from deepspeed.comm.torch import build_shm_op; build_shm_op()'
	@touch $@

$(VENV)/.examples: pyproject.toml $(BIN)/shoal
	$(BIN)/pip install -q -e '.[examples,ui]' '$(TORCH)'
	@touch $@

## demo: set up and run the pretraining example (data -> 2x2 GPT training -> eval) locally
demo: $(VENV)/.examples
	$(BIN)/shoal run examples/pretrain/pipeline.py main
	@echo "See every rank's loss, logs and the gang of this run in the web UI:"
	@echo "    $(BIN)/shoal ui $$($(BIN)/shoal runs --last)"

## test: set up and run the whole test suite
test: $(VENV)/.dev
	$(BIN)/python -m pytest -q -n 2 --durations=15

## test-fast: everything but the slow real-process tiers
test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -q -n 2 -m "not slow"

## pythons: the tiers that need no torch on every other Python the package claims (.ci/pythons)
pythons:
	bash .ci/pythons

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
