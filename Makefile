# Two entry points for people: `make run` (install, then run the daemon in the foreground)
# and `make check` (install, then lint, type-check and test: exactly what CI runs).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/snapd: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

.PHONY: install run check lint test bench
install: $(BIN)/snapd

run: install
	$(BIN)/snapd start

lint: install
	$(BIN)/ruff check snapd tests bench
	$(BIN)/mypy snapd

test: install
	$(BIN)/python -m pytest -q

check: lint test

bench: install
	$(BIN)/python bench/bench_store.py
	$(BIN)/python bench/bench_mark.py
