# The few commands people type. Everything installs into .venv next to this file.
#   make run    install, build DeepSpeed's ops once, serve the web UI (offline demo) on http://127.0.0.1:7860
#   make test   install (with test tools and headless Chromium) and run the whole test suite
# On an NVIDIA machine pick your CUDA build of PyTorch, e.g. make run TORCH="torch==2.13.0".

PY       ?= python3
VENV     ?= .venv
VENV_FLAGS ?=
TORCH    ?= torch==2.13.0
BIN      := $(VENV)/bin
PYTEST_ARGS ?=
# EXTRAS=[gpu] adds Liger's fused kernels on NVIDIA machines
EXTRAS   ?=

.PHONY: install install-test run test lint chromium

$(BIN)/python:
	$(PY) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e .$(EXTRAS)

install-test: install chromium
	$(BIN)/pip install --quiet -e ".[test]"

chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; }

# DeepSpeed compiles its C++ ops on first use; build them now (a minute or two, once) so the first job starts at once.
# A failure here is reported and the web UI starts anyway: a job that needs the op shows its compile phase.
run: install
	-$(BIN)/zeroboard build-ops
	$(BIN)/zeroboard webui

test: install-test
	$(BIN)/ruff check app tests benchmarks tools
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check app tests benchmarks tools
	$(BIN)/ruff format --check app tests benchmarks tools
