# Two entry points for people: `make run` (install, then run the daemon in the foreground)
# and `make check` (install, then lint, type-check and test in timed tiers: exactly what CI runs,
# since CI runs .ci/run and so does `make check`).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/snapd: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

.PHONY: install run check lint lint-unit lint-ci test bench mutants
install: $(BIN)/snapd

run: install
	$(BIN)/snapd start

lint: install lint-unit lint-ci
	$(BIN)/ruff check snapd tests bench .ci/tiers.py
	$(BIN)/mypy snapd
	$(BIN)/lint-imports

test: install
	$(BIN)/python -m pytest -q

check:
	sh .ci/run

# Mutation testing, outside CI (docs/reliability.md): the named hand-made mutants of the I/O
# paths (tests/mutants.py), then mutmut over the pure core ([tool.mutmut] in pyproject.toml).
# Slow (most of an hour on 2 cores); `mutmut results` lists the survivors afterwards.
mutants: install
	$(BIN)/python -c "import mutmut" 2>/dev/null || $(BIN)/pip install --quiet 'mutmut>=3.8,<4'
	$(BIN)/python tests/mutants.py
	$(BIN)/mutmut run

bench: install
	$(BIN)/python bench/bench_store.py
	$(BIN)/python bench/bench_mark.py

# systemd-analyze exits 0 on some bad values, so any output at all fails the check.
lint-unit:
	@if command -v systemd-analyze >/dev/null 2>&1; then \
		out=$$(systemd-analyze verify systemd/snapd.service 2>&1); \
		if [ -n "$$out" ]; then echo "$$out"; echo "systemd-analyze verify: warnings above"; exit 1; fi; \
		echo "systemd-analyze verify systemd/snapd.service: clean"; \
	else echo "systemd-analyze not found: unit not verified"; fi

# CI may start .ci/run with sh or bash rather than by its #! line: it must parse as both.
lint-ci:
	sh -n .ci/run
	bash -n .ci/run
