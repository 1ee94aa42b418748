# The README's two commands: `make demo` and `make test`. Both work on a fresh Debian with Python 3.11.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
SCENARIO ?= kv_pool_full

.PHONY: demo test lint deps system-deps clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

deps: $(VENV)/.installed

# Prometheus and Alertmanager from Debian, when they are missing (root or sudo needed once).
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager; }

lint: deps
	$(VENV)/bin/ruff check diagnosd tests bench
	$(VENV)/bin/ruff format --check diagnosd tests bench
	$(VENV)/bin/mypy

test: deps system-deps lint
	$(PY) -m diagnosd rules validate rules
	$(PY) -m pytest -q

demo: deps system-deps
	$(PY) -m diagnosd demo --scenario $(SCENARIO)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
