# The commands of the README. Each sets up .venv on first use: `make agent` and `make demo` install only what
# the programs import; `make test` and `make bench` add the development tools (pyproject's `test` extra), `make sim`
# what `colo-sim` reads and plots with: numpy, pyarrow, matplotlib (the `sim` extra). The distribution is `colo-k8s` (`colo` on the package index is
# an unrelated project): a .venv made under the old name has that one uninstalled first, its console scripts with it.
# Recipes are silent and what they print goes to stderr, so `make demo ARGS="--once --output json"` is pure JSON.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEV := $(VENV)/.dev-tools
SIM := $(VENV)/.sim-extra

.PHONY: agent demo test bench setup docs sim

$(BIN)/colo-agent: pyproject.toml
	@echo "make: installing Colo and its runtime dependencies into $(VENV) (the first time takes about a minute)" >&2
	@$(PY) -m venv $(VENV) >&2
	@$(BIN)/pip install -q --upgrade pip >&2
	@if $(BIN)/pip show -q colo 2>/dev/null; then $(BIN)/pip uninstall -q -y colo >&2; fi
	@$(BIN)/pip install -q -e . >&2
	@touch $@

$(DEV): $(BIN)/colo-agent
	@echo "make: adding the development tools (pytest, ruff, mypy...) to $(VENV)" >&2
	@$(BIN)/pip install -q -e '.[test]' >&2
	@touch $@

$(SIM): $(BIN)/colo-agent
	@echo "make: adding numpy, pyarrow and matplotlib (colo-sim) to $(VENV)" >&2
	@$(BIN)/pip install -q -e '.[sim]' >&2
	@touch $@

setup: $(DEV)

sim: $(SIM)
	@echo "make: ready: $(BIN)/colo-sim --trace FILE --plot FILE.png (docs/simulation.md)" >&2

agent: $(BIN)/colo-agent
	@$(BIN)/colo-agent --standalone $(ARGS)

demo: $(BIN)/colo-agent
	@BIN=$(BIN) exec demo/run.sh $(ARGS)

test: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(DEV)
	$(BIN)/python -m bench.run_all

docs: $(DEV)
	$(BIN)/python -m tools.docgen
	$(BIN)/python -m tools.rulegen
