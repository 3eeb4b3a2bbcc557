# docsvault — `make demo` builds the shipped sources.yaml and searches it; `make test` runs the fast tests (no
# `integration` marker) on $(TEST_WORKERS) processes; `make test-integration` the real-corpus / real-model / server
# tests; `make test-all` both (what CI runs).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the data dir docsvault itself uses: $DOCSVAULT_DATA when set (README "Start" exports it), so `make ui` and
# `make demo` run Dagster on the instance the CLI's builds record into (<data>/dagster), not a second one
DATA ?= $(or $(DOCSVAULT_DATA),$(CURDIR)/data)
TEST_WORKERS ?= 2
export OPENBLAS_NUM_THREADS ?= 1
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export DAGSTER_HOME ?= $(DATA)/dagster
# the Dagster UI's port on 127.0.0.1 (`make ui UI_PORT=3001` when 3000 is taken)
UI_PORT ?= 3000

.PHONY: install install-dev demo test test-integration test-all ui clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# pip >= 23.3 first: older pips (Python 3.11's venv brings 23.2) do not normalize extra names (PEP 685), so justext's
# `lxml[html_clean]` (lxml names it html-clean) warns "lxml 6.x does not provide the extra 'html_clean'"; then torch,
# pinned to the CPU wheel, so sentence-transformers does not pull a CUDA build
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "pip>=23.3"
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	@mkdir -p $(DAGSTER_HOME) && [ -f $(DAGSTER_HOME)/dagster.yaml ] || cat dagster.yaml dagster-event-log.yaml > $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/docsvault build || echo "(some sources failed: see the table above; the others were built)"
	$(BIN)/docsvault search -k 3 "how do I search my docs from an AI agent"

# pytest-xdist: one file per worker at a time (module fixtures are built once); TEST_WORKERS=0 runs in this process
test: install-dev
	$(BIN)/python -m pytest -q -m "not integration" -n $(TEST_WORKERS) --dist loadfile

test-integration: install-dev
	$(BIN)/python -m pytest -q -m integration

test-all: test test-integration

ui: install
	@mkdir -p $(DAGSTER_HOME) && [ -f $(DAGSTER_HOME)/dagster.yaml ] || cat dagster.yaml dagster-event-log.yaml > $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/docsvault ui --port $(UI_PORT)

clean:
	rm -rf data
