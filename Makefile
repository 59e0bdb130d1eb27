# The README's two commands (`make demo`, `make test`) do every set-up step themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
E2E_FAST ?= tests/e2e/test_seed_example.py tests/e2e/test_node_mark_annotation.py tests/e2e/test_controller_placement.py

.PHONY: setup tools test test-unit test-integration test-e2e demo bench lint check clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## setup: Python environment plus the pinned upstream tools (built once into ~/.cache)
setup: $(STAMP) tools

tools: $(STAMP)
	$(BIN)/cdctl tools build

## test: lint, unit tests, integration tests on the real control plane, the fast e2e subset
test: setup
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS) tests/unit tests/integration $(E2E_FAST)

## test-e2e: the whole acceptance suite on simulated GB200 racks
test-e2e: setup
	$(BIN)/pytest $(PYTEST_ARGS) tests/e2e

test-unit: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS) tests/unit

test-integration: setup
	$(BIN)/pytest $(PYTEST_ARGS) tests/integration

## image: the driver's container image, built without a container engine (docs/image.md)
.PHONY: image
image:
	PYTHON=$(PYTHON) bash scripts/build-image.sh $(IMAGE_ARGS)

## chart: the versioned chart archive a user pins, build/compute-domains-<version>.tgz (CRDs in
## crds/; lints the chart first): helm install compute-domains ./build/compute-domains-<version>.tgz
.PHONY: chart
chart: $(STAMP)
	$(BIN)/cdctl chart package --out build

## demo: the main job (see README)
demo: setup
	$(BIN)/cdctl demo

## bench: formation and churn benchmarks on the simulator, then the tables in docs/benchmarks.md
## BENCH_LARGE=1 adds the scale runs (issue 15): virtual nodes, N = BENCH_LARGE_SIZES one pod per
## node, then NVIDIA's issue #816 shape (256 pods, 4 per node); an hour or more, never in CI.
BENCH_SIZES ?= 4,18,36
BENCH_LARGE ?=
BENCH_LARGE_SIZES ?= 72,288,1152
bench: setup
	$(BIN)/cdctl bench formation --sizes $(BENCH_SIZES)
	$(BIN)/cdctl bench churn
ifneq ($(BENCH_LARGE),)
	$(BIN)/cdctl bench formation --nodes-mode virtual --repeats 1 --prefix scale \
	  --sizes $(BENCH_LARGE_SIZES)
	$(BIN)/cdctl bench formation --nodes-mode virtual --repeats 1 --prefix scale816 \
	  --sizes 256 --pods-per-node 4
endif
	$(BIN)/cdctl bench report

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

check: lint test-unit

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
