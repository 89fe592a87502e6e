#!/usr/bin/env bash
# Set up the local environment: check Java 17+, create .venv, install the exact versions in
# requirements.lock, then the lakescore package itself (editable, no further resolution), then
# fetch Delta Lake's Spark jars once into .venv/lakescore-jars/ (Spark's own resolver, network).
# After this, `make demo` and `make test` need no network.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  echo "lakescore set-up: Java was not found. PySpark needs Java 17 or newer:" >&2
  echo "  install OpenJDK 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless), then re-run." >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "lakescore set-up: found Java '${java_major:-unknown}', PySpark needs Java 17 or newer:" >&2
  echo "  install OpenJDK 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless), then re-run." >&2
  exit 1
fi

# Python 3.11 or 3.12 (pyproject.toml requires-python; Databricks Runtime 18 LTS ML and serverless
# environment 4 run 3.12). The first of PYTHON, python3.11, python3.12, python3 that exists is used.
if [ -z "${PYTHON:-}" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12)))' 2>/dev/null; then
  echo "lakescore set-up: Python 3.11 or 3.12 is required; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
  echo "  install one of them or set PYTHON=/path/to/python3.12, then re-run." >&2
  exit 1
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "lakescore set-up: Delta Lake's Spark jars into .venv/lakescore-jars (once; needs Maven Central)"
.venv/bin/python -c 'from lakescore.runtime.jars import fetch_delta_jars; fetch_delta_jars()' \
  > .venv/lakescore-jars.log 2>&1 || {
  echo "lakescore set-up: fetching Delta Lake's Spark jars failed; see .venv/lakescore-jars.log" >&2
  exit 1
}
touch .venv/.installed

# Headless Chromium renders the monitoring report in tests/monitoring/test_report.py (skipped
# without it). Optional: install it when we can, never fail set-up for it.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "lakescore set-up: installing chromium (headless report check) with apt-get"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
      || echo "lakescore set-up: could not install chromium; the report's browser test will be skipped" >&2
  else
    echo "lakescore set-up: chromium not found; the report's browser test will be skipped." >&2
    echo "  to run it: apt-get install -y chromium (as root)" >&2
  fi
fi
echo "lakescore set-up: environment ready in .venv"
