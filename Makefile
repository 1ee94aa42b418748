# The README's two commands: `make demo` and `make test`. Both work on a fresh Debian with Python 3.11.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
SCENARIO ?= kv_pool_full

.PHONY: demo test test-fast coverage lint deps system-deps clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

deps: $(VENV)/.installed

# Prometheus, Alertmanager, PostgreSQL and VictoriaMetrics from Debian, and venv support for
# Debian's own python3, when they are missing (root or sudo needed once).
system-deps:
	@missing=""; \
	for tool in prometheus promtool prometheus-alertmanager; do command -v $$tool >/dev/null || missing="prometheus prometheus-alertmanager"; done; \
	$(PYTHON) -c 'import ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v victoria-metrics >/dev/null || missing="$$missing victoria-metrics"; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

lint: deps
	$(VENV)/bin/ruff check diagnosd tests bench
	$(VENV)/bin/ruff format --check diagnosd tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# Coverage is measured on the tests of diagnosd's own units (UNITS), failing below COV_FLOOR; the
# rest (series tests of the shipped rules, the simulator, the drills, integration with a real
# Alertmanager, deployment, packaging, benchmarks) then runs without it. The simulator's tests
# drive whole fleets in pure Python, where tracing costs most (~2.3x slower under coverage):
# measured, they would take CI past its 15 minutes on 2 cores. Subprocesses (the CLI run as a
# real process) are measured too: see pyproject.toml.
# COV_FLOOR: the measured total rounded down, less 1 (93 %; `make coverage` prints it).
UNITS = tests/api tests/cli tests/daemon tests/engine tests/findings tests/generate tests/promlocal \
	tests/render tests/rulestest tests/sinks tests/sources tests/storage tests/topology tests/trees tests/test_logs.py
COV_FLOOR ?= 92
# Workers per pytest run (pytest-xdist). Most tests wait on a Prometheus, an Alertmanager or a
# process they started, so two workers use the second core; a module's tests stay on one worker,
# so its module fixtures (a backfilled Prometheus) are built once. JOBS=0: one process.
JOBS ?= auto
XDIST = $(if $(filter 0,$(JOBS)),,-n $(JOBS) --dist loadfile)

test: system-deps deps lint
	$(PY) -m diagnosd rules validate rules
	$(PY) -m pytest -q $(XDIST) $(UNITS) --cov --cov-report= --cov-fail-under=$(COV_FLOOR)
	$(PY) -m pytest -q $(XDIST) $(addprefix --ignore=,$(UNITS))

# The inner loop: everything but the tests marked slow (wheel builds, whole fleets, matrices).
test-fast: system-deps deps lint
	$(PY) -m pytest -q $(XDIST) -m 'not slow'

# What the measured tests leave unrun, line by line (the total `make test` holds to COV_FLOOR).
coverage: system-deps deps
	$(PY) -m pytest -q $(UNITS) --cov --cov-report=term-missing:skip-covered

demo: system-deps deps
	$(PY) -m diagnosd demo --scenario $(SCENARIO)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.*
