"""No source or prediction rows reach the driver on the Spark route: ``lakescore demo`` (score ->
publish -> monitor on Spark) runs with ``spark.driver.maxResultSize`` at Spark's minimum, 1 MiB, so
collecting the 84,292 predictions to the driver would fail; the same process then proves that it does,
on the same Spark session.

Spark's own broadcast joins are turned off for the run (see :func:`_small_results_env`). The limit
is a JVM start-up setting, so the run is its own process
(``PYSPARK_SUBMIT_ARGS``); the demo tables are written beforehand, with a 4,000-flight training
table so that training stays short (what is checked here is score, publish and monitor), and the
whole incoming quarter to score.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.mlflow_store import seed

from lakescore.demo_data import FLIGHTS, INCOMING
from lakescore.runtime import LocalRuntime
from lakescore.workflows.demo import load_data

pytestmark = [pytest.mark.spark, pytest.mark.long]

LIMIT = "1m"  # Spark's smallest accepted spark.driver.maxResultSize
PREDICTIONS = "main.flights.late_arrival_predictions"


def _small_results_env() -> dict[str, str]:
    env = dict(os.environ)
    # Spark broadcasts the smaller side of a join through the driver when it is under 10 MiB (the
    # monitor's joins of a run's rows with its inputs and labels): an optimizer choice, which the
    # same limit would refuse, so it is turned off here to test lakescore's own code.
    env["PYSPARK_SUBMIT_ARGS"] = (f"--conf spark.driver.maxResultSize={LIMIT} "
                                  "--conf spark.sql.autoBroadcastJoinThreshold=-1 pyspark-shell")
    env.pop("LAKESCORE_SPARK_CONNECT", None)
    return env


DEMO_THEN_COLLECT = """
import sys
from lakescore.cli import main
from lakescore.runtime import LocalRuntime
status = main(["demo", "--config-dir", sys.argv[1], "--home", sys.argv[2]])
print("demo exit", status, flush=True)
runtime = LocalRuntime(sys.argv[2])
print("maxResultSize", runtime.spark().conf.get("spark.driver.maxResultSize"), flush=True)
rows = runtime.spark_source(sys.argv[3], version=runtime.table_version(sys.argv[3])).collect()
print("collected", len(rows))
"""


def test_score_publish_monitor_on_spark_bring_no_rows_to_the_driver(tmp_path: Path, project_dir: Path,
                                                                      demo_tables, migrated_mlflow) -> None:
    home = tmp_path / "home"
    runtime = LocalRuntime(home)
    seed(home / "mlflow.db", migrated_mlflow())  # the demo process finds a migrated MLflow store
    runtime.write_table(FLIGHTS, demo_tables[FLIGHTS].sample(4000, random_state=3).reset_index(drop=True))
    runtime.write_table(INCOMING, demo_tables[INCOMING].reset_index(drop=True),
                        configuration={"delta.enableChangeDataFeed": "true"})
    load_data(runtime)  # the other demo tables; the two above are kept
    incoming = len(demo_tables[INCOMING])

    # the demo, then a collect of its predictions in the same process (the same JVM and limit)
    run = subprocess.run([sys.executable, "-c", DEMO_THEN_COLLECT, str(project_dir), str(home), PREDICTIONS],
                         env=_small_results_env(), capture_output=True, text=True, timeout=900)
    demo, _, after = run.stdout.partition("demo exit ")
    assert after.startswith("0\n"), run.stdout[-3000:] + run.stderr[-3000:]
    assert f"{incoming:,} in" in demo and "written by Spark Delta" in demo
    assert runtime.table_version(PREDICTIONS) == 0 and runtime.row_count(PREDICTIONS) == incoming
    assert "late_arrival_quality" in demo and "appended 1 row(s)" in demo
    # the demo's lookups, counted in Spark too: 12,656 incoming flights have no plane row (tests/test_demo_data.py)
    assert "main.flights.planes by tailnum: 12,656 of 84,292 source rows; the recipe imputes" in demo
    assert "feature_lookups=main.flights.weather v0, main.flights.planes v0" in demo

    assert f"maxResultSize {LIMIT}\n" in after  # the limit the demo ran under
    assert run.returncode != 0 and "collected" not in after and "maxResultSize" in run.stderr, \
        run.stdout[-2000:] + run.stderr[-2000:]
