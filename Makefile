# The two commands of the README: `make demo` and `make test`. Everything else is a step they call.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ENGRAM_VERSION ?= v1.20.0

.PHONY: demo test test-v3 test-nightly test-generations venv engram lint typecheck bench mutation explore clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

engram: venv
	$(BIN)/engram-harness engram install $(ENGRAM_VERSION)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

test: venv
	bash scripts/test.sh

test-v3: venv
	ENGRAM_KIT_TIER=v3 bash scripts/test.sh

# The tests longer than make test's budget (a worker giving up after engram's own backoffs, ~17 min).
test-nightly: venv
	ENGRAM_KIT_TIER=nightly bash scripts/test.sh

# The real-binary canary tests on all five schema generations (make test plays v1.20 and v3).
test-generations: venv
	ENGRAM_KIT_ALL_GENERATIONS=1 bash scripts/test.sh

demo: engram
	bash scripts/demo.sh

bench: engram
	$(BIN)/python -m bench

mutation: venv
	bash scripts/mutation.sh

# The nightly exploration: 30 minutes of generated histories with every nemesis; the seed is printed
# (EXPLORE_SEED=N repeats a night), violations land in explore-out/ as scenarios `engram-harness run` replays.
# Histories mostly wait for the worker's 30 s ticks, so EXPLORE_PARALLEL of them play side by side; each plays
# EXPLORE_MACHINES engram homes through its one cloud (2: machine B's pushes, A's pulls, I6 and I9).
EXPLORE_SEED ?= $(shell date +%s)
EXPLORE_PARALLEL ?= 6
EXPLORE_MACHINES ?= 2
explore: engram
	$(BIN)/engram-harness explore --seed $(EXPLORE_SEED) --budget 1800 --parallel $(EXPLORE_PARALLEL) --machines $(EXPLORE_MACHINES) \
		--nemesis storm503,latency,auth401,reset,ack_without_store,hang,truncated,slow_body,error500,dup_pull,partition_b --out explore-out --json explore-out/report.json

clean:
	rm -rf $(VENV) .cache dist mutants
