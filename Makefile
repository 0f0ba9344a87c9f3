# Two entry points for people: `make run` (install, then run the daemon in the foreground)
# and `make check` (install, then lint, type-check and test in timed tiers: exactly what CI runs,
# since CI runs .ci/run and so does `make check`).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/snapd: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,ui]'
	touch $@

.PHONY: install run check lint lint-unit lint-ci test bench soak mutants
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
# paths (tests/mutants.py: every mutant must apply, the tests pass unmutated first, and it exits
# non-zero unless every mutant is killed, which stops here), then mutmut over the pure core
# ([tool.mutmut] in pyproject.toml). Slow (hours on 2 shared cores); `mutmut results` lists the
# survivors afterwards.
mutants: install
	$(BIN)/python -c "import mutmut" 2>/dev/null || $(BIN)/pip install --quiet 'mutmut>=3.8,<4'
	$(BIN)/python tests/mutants.py
	$(BIN)/mutmut run

# Benchmarks are not part of CI (.ci/tiers.py runs tests only): they take ~2.5 h and want a
# machine nobody else loads. Each script writes docs/bench-results/<script>-<corpus>-<size>.json;
# bench/report.py prints the tables of docs/benchmarks.md from those files. BENCH_SIZES=1k,10k
# validates the method quickly; --cold needs root (drop_caches). The 500k tree (issue 33) needs
# fs.inotify.max_user_watches above its 239,171 directories (the scripts say so and stop).
BENCH_CORPORA ?= django npm
BENCH_SIZES ?= 1k 10k 100k
bench: install
	$(BIN)/pip install --quiet py-spy
	@command -v hyperfine >/dev/null || { echo "hyperfine missing: apt-get install hyperfine"; exit 1; }
	@command -v strace >/dev/null || { echo "strace missing: apt-get install strace"; exit 1; }
	$(BIN)/python bench/make_tree.py --corpus all --size all
	for c in $(BENCH_CORPORA); do for s in $(BENCH_SIZES); do \
		$(BIN)/python bench/bench_mark.py --corpus $$c --size $$s --profile || exit 1; done; done
	for c in $(BENCH_CORPORA); do \
		$(BIN)/python bench/bench_baseline.py --corpus $$c --size 100k --profile && \
		$(BIN)/python bench/bench_rollback.py --corpus $$c --size 100k --profile && \
		$(BIN)/python bench/bench_disk.py --corpus $$c --size 100k && \
		$(BIN)/python bench/bench_restart.py --corpus $$c --size 100k --profile && \
		$(BIN)/python bench/profile_memory.py --corpus $$c --size 100k && \
		$(BIN)/python bench/bench_cli.py --corpus $$c --size 100k || exit 1; done
	$(BIN)/python bench/bench_mark.py --corpus npm --size 100k --widest --profile
	$(BIN)/python bench/bench_baseline.py --corpus django --size 100k --cold
	$(BIN)/python bench/make_tree.py --corpus django --size 500k
	$(BIN)/python bench/bench_baseline.py --corpus django --size 500k --no-fsync-peer && \
	$(BIN)/python bench/bench_rollback.py --corpus django --size 500k && \
	$(BIN)/python bench/bench_restart.py --corpus django --size 500k && \
	$(BIN)/python bench/bench_mark.py --corpus django --size 500k && \
	$(BIN)/python bench/profile_memory.py --corpus django --size 500k
	$(BIN)/python bench/bench_soak.py
	$(BIN)/python bench/report.py

# The daemon's RSS over 10,000 marks (~20 min; part of bench).
soak: install
	$(BIN)/python bench/make_tree.py --corpus django --size 10k
	$(BIN)/python bench/bench_soak.py

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
