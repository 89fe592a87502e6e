"""The workflows on the databricks runtime, end to end by name: train -> score (Spark route) ->
publish -> receipts -> replay -> monitor, against a real local SparkSession with Delta's catalog.

Only the workspace is replaced, at the seams tests/runtime/test_databricks.py uses: tables are
``spark_catalog.<schema>.<table>`` (a valid three-part name in local Spark), MLflow's URIs point at
SQLite, the volume is a temporary folder. The runtime's ``table_location`` raises: on a workspace
a Unity Catalog managed table cannot be read by path, so no workflow may reach the prediction
table (or any other) through its location.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable
from fixtures.fake_feature_engineering import install as install_feature_engineering
from fixtures.mlflow_store import seed

from lakescore.config import load_project
from lakescore.runtime import DatabricksRuntime
from lakescore.runtime.databricks import MlflowUris
from lakescore.workflows.monitor import NOOP, monitor
from lakescore.workflows.publish import list_receipts, publish
from lakescore.workflows.score import score
from lakescore.workflows.train import train

pytestmark = [pytest.mark.spark, pytest.mark.long]


class ByNameOnly(DatabricksRuntime):
    """The databricks runtime with path access refused, as Unity Catalog refuses it for managed
    tables; ``located`` records every table whose location was asked for."""

    located: list[str]

    def table_location(self, name: str) -> str:
        self.located.append(name)
        raise AssertionError(f"table_location({name}) called: a workflow reached a table by path")

    def location_for_test(self, name: str) -> str:
        """The real location, for the test's own delta-rs checks."""
        return str(self.detail(name)["location"]).removeprefix("file:")


@pytest.fixture
def dbx(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrated_mlflow) -> ByNameOnly:
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is relative to the working folder
    seed(tmp_path / "workspace-mlflow.db", migrated_mlflow())  # an empty store, migrated once per session
    db = f"sqlite:///{tmp_path / 'workspace-mlflow.db'}"
    runtime = ByNameOnly(tmp_path / "Volumes" / "main" / "flights" / "lakescore", target="staging",
                         uris=MlflowUris(db, db), session=spark)
    runtime.located = []
    return runtime


@pytest.fixture
def project(dbx: ByNameOnly, spark, project_dir: Path, flights_sample: pd.DataFrame, lookup_tables,
            monkeypatch: pytest.MonkeyPatch):
    """The repository's config on catalog ``spark_catalog`` and a fresh schema; the 2,000-flight
    sample as the flights (label) table, its months 10-12 as the CDF-enabled score source. The demo's
    lookups go through Feature Engineering here: its stand-in (tests/fixtures/fake_feature_engineering.py)."""
    install_feature_engineering(monkeypatch)
    schema = f"dbw_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{schema}")
    project = load_project(project_dir, catalog="spark_catalog", schema=schema)
    dbx.write_table(project.training.data.table, flights_sample, mode="error")
    lookup_tables(dbx, catalog="spark_catalog", schema=schema)  # config/training.yml's feature tables
    incoming = flights_sample[flights_sample["month"] >= 10].reset_index(drop=True)
    dbx.write_table(project.inference.score_source_table, incoming.iloc[:200], mode="error",
                    configuration={"delta.enableChangeDataFeed": "true"})
    return project, incoming


def test_score_publish_receipts_replay_and_monitor_run_by_name(dbx: ByNameOnly, project) -> None:
    project, incoming = project
    inf = project.inference
    table, source = inf.prediction_table, inf.score_source_table
    assert inf.batch_compute == "spark" and table.startswith("spark_catalog.dbw_")
    trained = train(project, dbx)
    assert trained.version == 1

    run = score(project, dbx)
    first = publish(project, dbx, run)
    assert (first.action, first.engine, first.table_version) == ("append", "spark-delta", 1)
    stored = dbx.read_table(table)
    assert sorted(stored["flight_id"]) == sorted(incoming["flight_id"].iloc[:200])
    assert set(stored["run_id"]) == {run.run_id}
    log = DeltaTable(dbx.location_for_test(table))  # checked independently, with delta-rs on the files
    assert log.version() == 1 and json.loads(log.history(1)[0]["userMetadata"])["run_id"] == run.run_id
    assert log.transaction_version(first.receipt["app_id"]) == 1

    listed = list_receipts(dbx, table)["receipts"]
    assert [(r["run_id"], r["table_version"], r["source_version_to"]) for r in listed] == [(run.run_id, 1, 0)]
    kept = dbx.read_table(f"{table}_lakescore_receipts")  # the receipts table beside it, by name
    assert kept["run_id"].tolist() == [run.run_id] and kept["table_version"].tolist() == [1]

    again = publish(project, dbx, score(project, dbx))  # nothing new in the source: decided before scoring
    assert again.action == "noop" and dbx.table_version(table) == 1

    dbx.write_table(source, incoming.iloc[200:260], mode="append")  # a CDF window of 60 rows, v1
    window = score(project, dbx)
    second = publish(project, dbx, window)
    assert (second.action, second.table_version, second.receipt["source_version_from"]) == ("append", 2, 1)
    assert second.receipt["rows_in"] == 60 and dbx.row_count(table) == 260
    replayed = publish(project, dbx, window)  # the same staged run published again
    assert (replayed.action, replayed.table_version) == ("noop", 2)

    monitored = monitor(project, dbx)
    assert monitored.action == "appended 2 row(s)"
    quality = dbx.read_table(project.monitoring.quality_table).sort_values("table_version")
    assert quality["table_version"].tolist() == [1, 2] and quality["rows"].tolist() == [200, 60]
    assert quality["run_id"].tolist() == [run.run_id, window.run_id]
    assert monitor(project, dbx).action == NOOP
    assert dbx.located == []  # no workflow asked for a location
