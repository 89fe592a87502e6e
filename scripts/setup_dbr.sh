#!/usr/bin/env bash
# Set up the Databricks Runtime lane: a second environment, .venv-dbr, with the library versions of
# Databricks Runtime 18 LTS ML as far as PyPI has them for Python 3.11 (requirements-dbr.lock), the
# lakescore package itself (editable, no further resolution), and Delta Lake's Spark jars for that
# pyspark (4.1) in .venv-dbr/lakescore-jars/. `make test-dbr` runs the Spark, packaging and
# publication tests there. Java and Python checks: scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-dbr
PYTHON=${PYTHON:-python3.11}
if ! command -v "$PYTHON" >/dev/null 2>&1; then PYTHON=python3; fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "lakescore dbr set-up: Python 3.11 is required; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
  echo "  install Python 3.11 or set PYTHON=/path/to/python3.11, then re-run." >&2
  exit 1
fi
if ! command -v java >/dev/null 2>&1; then
  echo "lakescore dbr set-up: Java was not found; run \`bash scripts/setup.sh\` for what to install." >&2
  exit 1
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-dbr.lock
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "lakescore dbr set-up: Delta Lake's Spark jars into $VENV/lakescore-jars (once; needs Maven Central)"
"$VENV/bin/python" -c 'from lakescore.runtime.jars import fetch_delta_jars; fetch_delta_jars()' \
  > "$VENV/lakescore-jars.log" 2>&1 || {
  echo "lakescore dbr set-up: fetching Delta Lake's Spark jars failed; see $VENV/lakescore-jars.log" >&2
  exit 1
}
touch "$VENV/.installed"
echo "lakescore dbr set-up: environment ready in $VENV"
