# Two commands a user needs: `make demo` and `make test`. Each installs what it needs first.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

$(STAMP): requirements.lock pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

install: $(STAMP)

demo: install
	$(VENV)/bin/lakescore demo --config-dir config

test: install
	$(PY) -m pytest

bench: install
	$(PY) scripts/bench_scoring.py

clean:
	rm -rf .lakescore
