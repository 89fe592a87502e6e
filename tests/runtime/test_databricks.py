"""The databricks runtime against a real local SparkSession with Delta's catalog.

Only the workspace is replaced, at its narrowest seams: the session is the test session (tables
named ``spark_catalog.<schema>.<table>``, a valid three-part name in local Spark), MLflow's URIs
point at SQLite in a temporary folder, and the volume is a temporary folder. Expected values come
from delta-rs reading the same tables, or are worked out by hand.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from lakescore.errors import ChangeFeedReadError, RuntimeUnsupportedError, TableExistsError, TableNotFoundError
from lakescore.publish.plan import PublishRequest
from lakescore.runtime import PLACEMENTS, DatabricksRuntime, LocalRuntime, Runtime, get_runtime
from lakescore.runtime.databricks import MlflowUris


@pytest.fixture(scope="module")
def schema(spark) -> str:
    name = f"dbx_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{name}")
    return f"spark_catalog.{name}"


@pytest.fixture
def dbx(spark, tmp_path: Path) -> DatabricksRuntime:
    """The runtime on the test session, its volume a temp folder, MLflow in SQLite."""
    db = f"sqlite:///{tmp_path / 'workspace-mlflow.db'}"
    return DatabricksRuntime(tmp_path / "Volumes" / "main" / "flights" / "lakescore", target="staging",
                             uris=MlflowUris(db, db), session=spark)


def _flights() -> pd.DataFrame:
    return pd.DataFrame({"flight_id": pd.array([1, 2, 3], dtype="Int64"),
                         "carrier": pd.array(["UA", None, "B6"], dtype="string"),
                         "dep_delay": [2.0, None, -4.0]})


@pytest.fixture
def table(dbx: DatabricksRuntime, schema: str) -> str:
    """A CDF-enabled table: v0 three rows (one null dep_delay), v1 one more row, v2 a property."""
    name = f"{schema}.t_{uuid.uuid4().hex[:6]}"
    dbx.write_table(name, _flights(), mode="error", configuration={"delta.enableChangeDataFeed": "true"})
    dbx.write_table(name, pd.DataFrame({"flight_id": pd.array([4], dtype="Int64"),
                                        "carrier": pd.array(["AA"], dtype="string"), "dep_delay": [7.0]}),
                    mode="append")
    dbx.spark().sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('lakescore.note' = 'v2')")
    return name


def _delta_rs(dbx: DatabricksRuntime, name: str, version: int | None = None):
    from deltalake import DeltaTable

    return DeltaTable(dbx.table_location(name).removeprefix("file:"), version=version)


def test_table_facts_match_what_delta_rs_reads_from_the_same_log(dbx: DatabricksRuntime, table: str) -> None:
    assert isinstance(dbx, Runtime) and dbx.placement is PLACEMENTS["databricks"]
    assert dbx.placement.mlflow.startswith("workspace tracking (databricks) and the Unity Catalog registry")
    log = _delta_rs(dbx, table)
    assert dbx.table_exists(table)
    assert dbx.table_location(table).endswith(table.split(".")[-1])
    assert dbx.table_ref(table) == table  # the writer addresses it by name, not by location
    assert dbx.table_version(table) == log.version() == 2
    assert dbx.table_id(table) == log.metadata().id
    assert dbx.table_columns(table) == ["flight_id", "carrier", "dep_delay"]
    assert dbx.table_schema(table) == pa.schema([("flight_id", pa.int64()), ("carrier", pa.string()),
                                                 ("dep_delay", pa.float64())])
    assert dbx.history_versions(table, version=2, limit=10) == [2, 1, 0]
    assert dbx.history_versions(table, version=1, limit=1) == [1]
    assert dbx.reader_features(table) == frozenset()
    assert dbx.unreadable_features(table, engine="spark") == frozenset()


def test_versions_time_travel_and_properties_at_a_version(dbx: DatabricksRuntime, table: str) -> None:
    assert dbx.row_count(table) == 4 and dbx.row_count(table, version=0) == 3
    assert dbx.null_rows(table, "dep_delay", version=0) == 1
    assert sorted(r.flight_id for r in dbx.spark_source(table, version=0).collect()) == [1, 2, 3]
    assert dbx.table_properties(table) == {"delta.enableChangeDataFeed": "true", "lakescore.note": "v2"}
    # v1 predates the ALTER: read from the _delta_log with Spark, checked against delta-rs at v1
    at_v1 = dbx.table_properties(table, version=1)
    assert at_v1 == {"delta.enableChangeDataFeed": "true"} == dict(_delta_rs(dbx, table, 1).metadata().configuration)


def test_read_table_and_empty_frame_keep_nullable_dtypes_and_apply_filters(dbx: DatabricksRuntime, table: str) -> None:
    frame = dbx.read_table(table, version=0).sort_values("flight_id").reset_index(drop=True)
    assert [str(t) for t in frame.dtypes] == ["Int64", "object", "float64"]
    assert frame["flight_id"].tolist() == [1, 2, 3] and frame["carrier"].tolist() == ["UA", None, "B6"]
    assert frame["dep_delay"].isna().tolist() == [False, True, False]
    picked = dbx.read_table(table, columns=["flight_id"], filters=[("flight_id", ">=", 2), ("carrier", "!=", "B6")])
    assert picked["flight_id"].tolist() == [4]  # 2 has a null carrier (SQL: unknown), 3 is B6
    assert dbx.read_table(table, filters=[("flight_id", "in", [1, 4])])["flight_id"].sort_values().tolist() == [1, 4]
    empty = dbx.empty_frame(table)
    assert list(empty.columns) == ["flight_id", "carrier", "dep_delay"] and len(empty) == 0
    assert str(empty["dep_delay"].dtype) == "float64"


def test_change_feed_by_name(dbx: DatabricksRuntime, table: str) -> None:
    changes = dbx.read_changes(table, first=1, last=2, columns=["flight_id", "carrier"])
    assert changes.to_pylist() == [{"flight_id": 4, "carrier": "AA", "_change_type": "insert", "_commit_version": 1}]
    assert changes.schema.field("carrier").type == pa.large_string()
    plain = table + "_nocdf"  # a source without the change data feed
    dbx.write_table(plain, _flights(), mode="error")
    dbx.write_table(plain, _flights(), mode="append")
    with pytest.raises(ChangeFeedReadError, match=f"change data feed of {plain} cannot be read for versions 1..1"):
        dbx.read_changes(plain, first=1, last=1, columns=["flight_id"])


def test_a_name_that_does_not_resolve_names_the_table_catalog_schema_and_fix(dbx: DatabricksRuntime,
                                                                             schema: str) -> None:
    missing = f"{schema}.nope"
    assert not dbx.table_exists(missing)
    with pytest.raises(TableNotFoundError) as err:
        dbx.table_version(missing)
    text = str(err.value)
    assert f"table {missing} does not resolve (no such table in catalog spark_catalog, schema {schema[14:]})" in text
    assert "GRANT USE CATALOG ON CATALOG spark_catalog" in text and err.value.code == "table_not_found"
    assert not dbx.table_exists("nocatalog.flights.flights")  # a missing catalog answers False ...
    with pytest.raises(TableNotFoundError, match="catalog nocatalog does not exist or is not visible"):
        dbx.table_id("nocatalog.flights.flights")  # ... and every other method names it
    with pytest.raises(TableNotFoundError, match="USE SCHEMA ON SCHEMA spark_catalog.absent and SELECT"):
        dbx.read_table("spark_catalog.absent.flights")  # local Spark reports a missing schema as a missing table
    with pytest.raises(TableNotFoundError, match="not a three-part name"):
        dbx.table_exists("flights")


def test_write_table_refuses_to_touch_an_existing_table_and_merges_new_columns(dbx: DatabricksRuntime,
                                                                               table: str) -> None:
    with pytest.raises(TableExistsError, match=f"table {table} already exists"):
        dbx.write_table(table, _flights(), mode="error")
    assert dbx.table_version(table) == 2
    more = pd.DataFrame({"flight_id": pd.array([5], dtype="Int64"), "carrier": pd.array(["DL"], dtype="string"),
                         "dep_delay": [1.0], "note": ["new"]})
    dbx.write_table(table, more, mode="append", schema_mode="merge")
    assert dbx.table_columns(table)[-1] == "note" and dbx.row_count(table) == 5
    with pytest.raises(RuntimeUnsupportedError, match=r"options \['partition_by'\]"):
        dbx.write_table(table, more, mode="append", partition_by=["carrier"])


# --- publication by name ---------------------------------------------------------------------

SCHEMA = (("flight_id", "long"), ("prediction", "long"), ("run_id", "string"))


def _request(name: str, run_id: str) -> PublishRequest:
    return PublishRequest(f"lakescore/score/staging/{name}", run_id, name, "main.f.src", "sid", "incremental",
                          "append", None, 4, None, None, "main.f.model", 2, "sha", "cfg", SCHEMA, 3)


def test_publish_by_name_commits_once_with_its_receipt_and_a_replay_is_a_noop(dbx: DatabricksRuntime,
                                                                              schema: str) -> None:
    from lakescore.publish.spark_delta import publish

    name = f"{schema}.preds_{uuid.uuid4().hex[:6]}"
    spark = dbx.spark()
    rows = spark.createDataFrame([(1, 0, "run-1"), (2, 1, "run-1"), (3, 0, "run-1")], "flight_id long, prediction "
                                 "long, run_id string")
    request = _request(name, "run-1")
    decision, version, receipt = publish(dbx.table_ref(name), rows, request, keys=["flight_id"])
    assert (decision.action, version) == ("append", 1)  # v0 creates the empty table, v1 the rows
    assert (receipt["run_id"], receipt["txn_version"], receipt["table_version"]) == ("run-1", 1, 1)
    assert dbx.row_count(name) == 3
    history = {r["version"]: r["userMetadata"] for r in spark.sql(f"DESCRIBE HISTORY {name}").collect()}
    assert json.loads(history[1])["run_id"] == "run-1"
    stored = dbx.read_table(f"{name}_lakescore_receipts")  # the receipts table, beside it by name
    assert stored["table_version"].tolist() == [1] and stored["run_id"].tolist() == ["run-1"]
    assert _delta_rs(dbx, name).transaction_version(request.app_id) == 1  # the app transaction, read by delta-rs

    again = replace(request, run_id="run-2")  # the same request, run again
    decision, version, replayed = publish(dbx.table_ref(name), rows, again, keys=["flight_id"])
    assert decision.action == "noop" and version == 1 and replayed["run_id"] == "run-1"
    assert dbx.table_version(name) == 1 and dbx.row_count(name) == 3


def test_the_spark_log_reader_finds_app_transactions_across_checkpoints(dbx: DatabricksRuntime, schema: str) -> None:
    from lakescore.runtime.delta_log import app_txn_version

    name = f"{schema}.txn_{uuid.uuid4().hex[:6]}"
    spark = dbx.spark()
    one = spark.createDataFrame([(1,)], "id long")
    one.write.format("delta").option("delta.checkpointInterval", "2").saveAsTable(name)
    for txn in (1, 2, 3):  # v1..v3; checkpoints at v2 (and the log keeps every JSON here)
        one.write.format("delta").mode("append").options(txnAppId="app", txnVersion=str(txn)).saveAsTable(name)
    location = dbx.table_location(name)
    assert app_txn_version(spark, location, "app", 3) == 3 == _delta_rs(dbx, name).transaction_version("app")
    assert app_txn_version(spark, location, "app", 1) == 1  # pinned to v1: later commits are not seen
    assert app_txn_version(spark, location, "other", 3) is None
    for commit in (1, 2):  # log cleanup removed the commits before the checkpoint: it still knows
        Path(location.removeprefix("file:"), "_delta_log", f"{commit:020d}.json").unlink()
    assert app_txn_version(spark, location, "app", 2) == 2


def test_the_app_transaction_is_unknown_where_the_location_refuses_path_reads() -> None:
    from lakescore.publish.spark_delta import spark_log_app_txn

    class Refusing:  # a session whose reads of managed storage fail, as Unity Catalog's do
        @property
        def read(self):
            raise RuntimeError("[UNAUTHORIZED_ACCESS] Path-based access to a managed table is not allowed")

    assert spark_log_app_txn(Refusing())("s3://managed/t", "app", 3) is None

    class Broken:  # any other failure is raised, never taken for "no app transaction"
        @property
        def read(self):
            raise RuntimeError("[INTERNAL_ERROR] boom")

    with pytest.raises(RuntimeError, match="boom"):
        spark_log_app_txn(Broken())("s3://bucket/t", "app", 3)


# --- models, run store, choice, and nothing local ---------------------------------------------

def test_mlflow_uses_the_injected_uris_and_the_bundle_experiment(dbx: DatabricksRuntime, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is relative to the working folder
    user = dbx.spark().sql("SELECT current_user() AS u").first()["u"]
    assert dbx.experiment_path() == f"/Workspace/Users/{user}/.bundle/lakescore/staging/lakescore"
    mlflow = dbx.mlflow()
    assert mlflow.get_tracking_uri() == dbx.uris.tracking and mlflow.get_registry_uri() == dbx.uris.registry
    assert mlflow.MlflowClient().get_experiment_by_name(dbx.experiment_path()) is not None
    assert MlflowUris() == MlflowUris("databricks", "databricks-uc")  # what a job uses


def test_runs_live_on_the_volume_and_first_use_holds_nothing(dbx: DatabricksRuntime) -> None:
    runs = dbx.runs_dir()
    assert runs == dbx.home / "runs" and runs.is_dir()
    with dbx.first_use("mlflow") as held:
        assert held is None
    assert sorted(p.name for p in dbx.home.rglob("*")) == ["runs"]  # no lock file anywhere
    missing = DatabricksRuntime(Path(f"/Volumes/main/flights/nope_{uuid.uuid4().hex[:6]}"))
    with pytest.raises(RuntimeUnsupportedError, match=r"CREATE VOLUME IF NOT EXISTS main\.flights\.nope_"):
        missing.runs_dir()


def test_get_runtime_chooses_databricks_on_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "18.0")
    monkeypatch.setenv("BUNDLE_TARGET", "staging")
    for name in ("LAKESCORE_HOME", "LAKESCORE_EXPERIMENT"):
        monkeypatch.delenv(name, raising=False)
    runtime = get_runtime(catalog="dev_cat", schema="flights_someone")
    assert isinstance(runtime, DatabricksRuntime) and runtime.kind == "databricks"
    assert (runtime.target, str(runtime.home)) == ("staging", "/Volumes/dev_cat/flights_someone/lakescore")
    assert get_runtime(target="prod", experiment="/Workspace/x/lakescore").experiment == "/Workspace/x/lakescore"
    assert get_runtime(target="prod").target == "prod"
    assert isinstance(get_runtime("local", home="/tmp/somewhere"), LocalRuntime)  # --runtime local still wins
    with pytest.raises(RuntimeUnsupportedError, match="got home '.lakescore', a local folder"):
        get_runtime(home=".lakescore")


def test_nothing_local_only_is_reachable(dbx: DatabricksRuntime, table: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    dbx.runs_dir()
    with dbx.first_use("demo_data"):
        dbx.read_table(table)
    assert list(work.iterdir()) == []  # no .lakescore, no SQLite, nothing in the working folder
    job = DatabricksRuntime(Path("/Volumes/main/flights/lakescore"))
    text = json.dumps({k: str(v) for k, v in vars(job).items()}) + repr(job.placement)
    assert ".lakescore" not in text and "sqlite" not in text.lower()
    with pytest.raises(RuntimeUnsupportedError):
        DatabricksRuntime(Path("/home/someone/.lakescore"))


@pytest.mark.connect
def test_the_runtime_and_a_publication_by_name_run_on_spark_connect(spark_connect, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from fixtures.on_connect import run_by_name

    from lakescore.runtime.local_spark import CONNECT_MODE_ENV

    monkeypatch.setenv(CONNECT_MODE_ENV, "1")  # pyspark's API mode for this test (conftest.spark_api)
    result = run_by_name(spark_connect, tmp_path / "volume")
    assert result["session"] == "pyspark.sql.connect.session"
    assert (result["version"], result["properties_v0"]) == (1, {"delta.enableChangeDataFeed": "true"})
    assert result["changes"] == [{"id": 3, "_change_type": "insert", "_commit_version": 1}]
    assert result["rows_v0"] == [1, 2]
    assert result["published"] == ["append", 1] and result["replayed"] == ["noop", 1]
    assert result["app_txn"] == 1 and result["runs"] == str(tmp_path / "volume" / "runs")


def _at_once(call) -> list:
    """``call()`` in two threads released together; their answers."""
    import threading

    gate, out = threading.Barrier(2, timeout=120), []

    def one():
        gate.wait()
        out.append(call())

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_two_jobs_appending_the_same_rows_at_once_append_them_once(dbx: DatabricksRuntime, schema: str) -> None:
    """Keyed rows (a Spark MERGE on the key, a new column merged into the schema) and a batch
    with an app transaction (txnAppId/txnVersion), each written by two jobs at the same moment."""
    keyed = f"{schema}.quality_{uuid.uuid4().hex[:6]}"
    dbx.write_table(keyed, pd.DataFrame({"run_id": ["a"], "label_table_version": pd.array([0], dtype="Int64")}))
    rows = pd.DataFrame({"run_id": ["a", "b"], "label_table_version": pd.array([0, 0], dtype="Int64"),
                         "measurement": ["first", "first"]})
    assert sorted(_at_once(lambda: dbx.insert_new(keyed, rows, keys=["run_id", "label_table_version"],
                                                  schema_mode="merge"))) == [0, 1]
    found = dbx.read_table(keyed).sort_values("run_id")
    assert found["run_id"].tolist() == ["a", "b"] and found["measurement"].tolist()[1] == "first"

    inference = f"{schema}.inference_{uuid.uuid4().hex[:6]}"
    dbx.write_table(inference, pd.DataFrame({"request_id": ["r0"]}))
    for version in (0, 1):
        batch = pd.DataFrame({"request_id": [f"r{version + 1}"] * 2})
        _at_once(lambda batch=batch, version=version: dbx.append_once(inference, batch, app_id="ep-1", version=version))
    assert sorted(dbx.read_table(inference)["request_id"]) == ["r0", "r1", "r1", "r2", "r2"]
