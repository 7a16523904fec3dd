# The commands of the README. Each sets up .venv on first use: `make agent` and `make demo` install only what
# the programs import; `make test` and `make bench` add the development tools (pyproject's `test` extra).
# Recipes are silent and what they print goes to stderr, so `make demo ARGS="--once --output json"` is pure JSON.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEV := $(VENV)/.dev-tools

.PHONY: agent demo test bench setup docs

$(BIN)/colo-agent: pyproject.toml
	@echo "make: installing Colo and its runtime dependencies into $(VENV) (the first time takes about a minute)" >&2
	@$(PY) -m venv $(VENV) >&2
	@$(BIN)/pip install -q --upgrade pip >&2
	@$(BIN)/pip install -q -e . >&2
	@touch $@

$(DEV): $(BIN)/colo-agent
	@echo "make: adding the development tools (pytest, ruff, mypy...) to $(VENV)" >&2
	@$(BIN)/pip install -q -e '.[test]' >&2
	@touch $@

setup: $(DEV)

agent: $(BIN)/colo-agent
	@$(BIN)/colo-agent --standalone $(ARGS)

demo: $(BIN)/colo-agent
	@BIN=$(BIN) demo/run.sh $(ARGS)

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
