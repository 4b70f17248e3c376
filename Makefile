# The few commands people type. Everything installs into .venv next to this file.
#   make run    install, build DeepSpeed's ops once, serve the web UI (offline demo) on http://127.0.0.1:7860
#   make test   install (with test tools and headless Chromium) and run the whole test suite
#   make test-fast   the tests that start no training process, browser, cluster or container (the edit-test loop)
#   make screenshots   regenerate the documentation images in docs/images (an image changes only when the page did)
# PyTorch comes from pip's index unless TORCH_INDEX names another, e.g. the CUDA 12.8 builds:
#   make run TORCH_INDEX=https://download.pytorch.org/whl/cu128 EXTRAS=[gpu]
# or the CPU-only builds on a machine without a GPU: TORCH_INDEX=https://download.pytorch.org/whl/cpu

PY       ?= python3
VENV     ?= .venv
VENV_FLAGS ?=
TORCH    ?= torch==2.13.0
TORCH_INDEX ?=
BIN      := $(VENV)/bin
PYTEST_ARGS ?=
# EXTRAS=[gpu] adds Liger's fused kernels on NVIDIA machines
EXTRAS   ?=
# e.g. WEBUI_ARGS="--port 8080"
WEBUI_ARGS ?=
# e.g. SHOTS_ARGS="--lang zh"
SHOTS_ARGS ?=

.PHONY: install install-test install-test-tools run test test-fast lint chromium screenshots slurm liger-source container-tools

$(BIN)/python:
	$(PY) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/pip install --quiet -e .$(EXTRAS)

# the Python test tools only (test-fast needs nothing else)
install-test-tools: install liger-source
	$(BIN)/pip install --quiet -e ".[test]"

install-test: install-test-tools chromium slurm container-tools

chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; }

# The container test builds the Dockerfile and runs it without a Docker daemon: Debian's podman (buildah inside),
# runc, debootstrap and slirp4netns (root; apt waits for another apt to finish).
CONTAINER_TOOLS := podman buildah runc debootstrap slirp4netns
container-tools:
	@for t in $(CONTAINER_TOOLS); do command -v $$t >/dev/null || missing=1; done; [ -z "$$missing" ] || \
	  { apt-get -o DPkg::Lock::Timeout=600 update -qq && \
	    apt-get -o DPkg::Lock::Timeout=600 install -y -qq $(CONTAINER_TOOLS) >/dev/null; }

# DeepSpeed compiles its C++ ops on first use; build them now (once per Python environment, into a folder of its own
# that build-ops prints with each op's time) so the first job starts at once.
# A failure here is reported and the web UI starts anyway: a job that needs the op shows its compile phase.
run: install
	-$(BIN)/zeroboard build-ops
	$(BIN)/zeroboard webui $(WEBUI_ARGS)

# Both cores: each module of tests that start training processes, browsers, clusters or containers stays on one
# worker, the longest first (tests/conftest.py groups and orders them), the others fill in; the 25 slowest are listed.
PYTEST_PARALLEL ?= -n auto --dist loadgroup --no-loadscope-reorder --durations=25
FAST_MARKERS := not (gpu or e2e or browser or slurm or container)

# DeepSpeed's ops are built first, as make run builds them: a test's job then starts at once instead of compiling
# them (2-3 minutes on 2 cores, beside whatever else the suite runs). The test of the compile phase itself uses a
# folder of its own (tests/test_first_run.py).
test: install-test
	$(BIN)/ruff check app tests benchmarks tools
	$(BIN)/zeroboard build-ops
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-fast: install-test-tools
	$(BIN)/ruff check app tests benchmarks tools
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check app tests benchmarks tools
	$(BIN)/ruff format --check app tests benchmarks tools

# The documentation images (docs/images), from a web UI of its own on the offline demo; see tools/screenshots.py.
# It needs what a browser needs and nothing of the tests' (no Slurm, no podman).
screenshots: install chromium
	$(BIN)/pip install --quiet -e ".[shots]"
	$(BIN)/python tools/screenshots.py --out docs/images $(SHOTS_ARGS)

# A two-node Slurm cluster on this machine for the tests (tests/slurm_cluster.sh starts and stops it): Debian's
# slurm-wlm with munge, and slurmdbd on MariaDB so that sacct answers.
slurm:
	@command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge slurmdbd mariadb-server >/dev/null; }

# Liger's own source for the planner's tests (which kernels each model type gets): its wheel, downloaded, not
# installed (installing it would pull Triton, a GPU compiler)
WHEEL_CACHE ?= $(HOME)/.cache/zeroboard/wheels
liger-source: $(BIN)/python
	@ls $(WHEEL_CACHE)/liger_kernel-*.whl >/dev/null 2>&1 || $(BIN)/pip download --quiet --no-deps "liger-kernel>=0.8,<0.9" -d $(WHEEL_CACHE)
