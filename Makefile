# Two commands a user needs: `make demo` and `make test`. Each installs what it needs first.
# `make lint` checks the code with ruff (src, scripts, tests) and mypy (src/lakescore; settings in
# pyproject.toml), then builds the docs (docs/, mkdocs.yml) strictly into .lakescore/site.
# `make test-dbr` runs the Spark, packaging and publication tests again on Databricks Runtime 18
# LTS ML's library versions (requirements-dbr.lock) in a second environment, .venv-dbr.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DBR_VENV := .venv-dbr
DBR_STAMP := $(DBR_VENV)/.installed
# The bundle rehearsal, the longest file, comes first so that a worker starts it at once.
DBR_TESTS := tests/test_bundle_rehearsal.py tests/runtime tests/publish tests/scoring tests/test_packaging.py \
             tests/workflows/test_score.py tests/test_wheel_install.py
# Both test lanes run in TEST_WORKERS processes (pytest-xdist): each test file runs whole, in order,
# in one process; session fixtures (a Spark session, a fitted model) are built once per process.
# Files are handed out in the order tests/conftest.py gives them (long ones first), not re-sorted.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: install install-dbr demo test test-dbr lint bench clean

$(STAMP): requirements.lock pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

install: $(STAMP)

$(DBR_STAMP): requirements-dbr.lock pyproject.toml scripts/setup_dbr.sh
	bash scripts/setup_dbr.sh

install-dbr: $(DBR_STAMP)

demo: install
	$(VENV)/bin/lakescore demo --config-dir config

test: install
	$(PY) -m pytest $(XDIST)

lint: install
	$(VENV)/bin/ruff check src scripts tests
	$(VENV)/bin/mypy
	$(VENV)/bin/mkdocs build --strict -d .lakescore/site

test-dbr: install-dbr
	$(DBR_VENV)/bin/python -m pytest $(XDIST) $(DBR_TESTS)

bench: install
	$(PY) scripts/bench_capacity.py

clean:
	rm -rf .lakescore
