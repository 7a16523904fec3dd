# The commands of the README. Each sets up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: agent demo test bench setup

$(BIN)/colo-agent: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(BIN)/colo-agent

agent: setup
	$(BIN)/colo-agent --standalone $(ARGS)

demo: setup
	BIN=$(BIN) demo/run.sh $(ARGS)

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/python -m bench.run_all
