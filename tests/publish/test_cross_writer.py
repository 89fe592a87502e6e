"""Both writers produce the same tables, in each direction, on a real local Spark Delta and delta-rs.

Each test hands one :class:`~lakescore.publish.plan.PublishRequest` (built from a real scored run,
as ``lakescore publish`` builds it) to :func:`lakescore.publish.delta_rs.publish` and to
:func:`lakescore.publish.spark_delta.publish`:

- a request one writer committed is a no-op for the other (table version unchanged), and a later
  window published by the other continues the watermark;
- each lists the receipts the other wrote, from the log and from the receipts table
  (``<path>_lakescore_receipts``, which both writers append to with delta-rs for a path table),
  and Spark SQL reads the same receipts;
- delta-rs reads what Spark Delta wrote (protocol and reader features, values and types),
  after a ``replaceWhere`` period replacement, an ``OPTIMIZE`` and a checkpoint, and the app
  transaction Spark recorded, from Spark's checkpoint once the log before it is cleaned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from lakescore.publish import delta_rs, spark_delta
from lakescore.publish.plan import Scope
from lakescore.publish.run import arrow_facts
from lakescore.publish.spark_delta import SparkDeltaWriter
from lakescore.publish.state import delta_schema, receipts, receipts_path, stored_receipts
from lakescore.workflows.publish import build_request

pytestmark = pytest.mark.spark

TARGET = "main.flights.late_arrival_predictions"  # config/inference.yml
ROUTE = {"delta-rs": "single_node", "spark": "spark"}  # the route each writer publishes for
DIRECTIONS = [("delta-rs", "spark"), ("spark", "delta-rs")]


@pytest.fixture
def lake(lake, request):
    """The publication lake with the test session's SparkSession."""
    return lake.on("spark", request)


def publish_by(engine: str, lake: Any, run: Any, *, path: str | None = None) -> tuple[Any, int | None, dict | None]:
    """Publish ``run`` with ``engine`` through the writer module itself (the request built as
    ``lakescore publish`` builds it); returns ``(decision, table version, receipt)``."""
    project, runtime = lake.project, lake.runtime
    data = delta_rs.to_arrow(run.predictions, run_id=run.run_id)
    pub = project.inference.publication
    request = build_request(project, run, arrow_facts(data, pub.period_column), target=runtime.target)
    options = dict(allow_empty=pub.allow_empty, model_change_mode=pub.model_change_mode,
                   period_column=pub.period_column, keys=list(run.plan.record_keys),
                   read=Scope.from_json(run.scope).read, batch_compute=ROUTE[engine], rows_in=data.num_rows)
    if engine == "delta-rs":
        return delta_rs.publish(path or lake.path, data, request, **options)
    return spark_delta.publish(path or lake.path, runtime.spark().createDataFrame(data), request, **options)


def engines_of(path: str) -> list[str]:
    """Which engine made each data commit of the Delta table at ``path``, oldest first, from its
    commitInfo (Spark Delta writes ``engineInfo``, delta-rs ``clientVersion``)."""
    found = []
    for entry in sorted(DeltaTable(path).history(), key=lambda h: h["version"]):
        if entry.get("operation") in ("WRITE", "CREATE TABLE"):
            found.append("spark" if "Delta-Lake" in str(entry.get("engineInfo", "")) else
                         "delta-rs" if str(entry.get("clientVersion", "")).startswith("delta-rs") else "?")
    return found


def seen_by_spark(lake: Any) -> list[tuple[str, int, str]]:
    """The receipts as Spark SQL reads them (what a named table gets; a path table's writer reads
    with delta-rs)."""
    state = SparkDeltaWriter(lake.path, lake.runtime.spark().range(0), table=TARGET, app_id="-",
                             state_engine="spark").read()
    return [(r["run_id"], r["table_version"], r["batch_compute"]) for r in state.receipts]


def seen_by_delta_rs(lake: Any) -> list[tuple[str, int, str]]:
    return [(r["run_id"], r["table_version"], r["batch_compute"]) for r in receipts(lake.path)]


@pytest.mark.parametrize(("first", "other"), DIRECTIONS)
def test_a_request_one_writer_committed_is_a_noop_for_the_other_which_continues_the_watermark(lake, first, other):
    def v(commit: int) -> int:  # delta-rs creates the table empty (v0), Spark's first commit creates it
        return commit if first == "delta-rs" else commit - 1

    lake.add_source(lake.flights.iloc[:150])  # source v0
    initial = lake.score()
    decision, version, _ = publish_by(first, lake, initial)
    assert (decision.action, version) == ("append", v(1))
    lake.add_source(lake.flights.iloc[150:200])  # source v1
    window = lake.score()
    assert (window.scope["source_version_from"], window.scope["source_version_to"]) == (1, 1)
    _, version, receipt = publish_by(first, lake, window)
    assert (version, receipt["batch_compute"]) == (v(2), ROUTE[first])

    for run, at in ((window, v(2)), (initial, v(1))):  # the newest request, and an older one
        decision, version, found = publish_by(other, lake, run)
        assert (decision.action, version) == ("noop", v(2))
        assert decision.message == f"replay: no-op (run {run.run_id} already published this request to {TARGET} v{at})"
        assert (found["run_id"], found["table_version"]) == (run.run_id, at)
    assert DeltaTable(lake.path).version() == v(2) and len(lake.table()) == 200

    lake.add_source(lake.flights.iloc[200:230])  # source v2: the other writer takes over
    later = lake.score()
    assert (later.scope["source_version_from"], later.scope["source_version_to"]) == (2, 2)
    decision, version, receipt = publish_by(other, lake, later)
    assert (decision.action, version, receipt["watermark_before"], receipt["watermark_after"]) == ("append", v(3), 1, 2)
    assert DeltaTable(lake.path).transaction_version(receipt["app_id"]) == v(3)  # one app transaction for both
    lake.assert_whole()
    assert engines_of(lake.path) == [*(["delta-rs"] if first == "delta-rs" else []), first, first, other]

    expected = [(later.run_id, v(3), ROUTE[other]), (window.run_id, v(2), ROUTE[first]),
                (initial.run_id, v(1), ROUTE[first])]
    assert seen_by_delta_rs(lake) == expected
    assert seen_by_spark(lake) == expected
    assert sorted(r["table_version"] for r in stored_receipts(lake.path)) == [v(1), v(2), v(3)]
    assert set(engines_of(receipts_path(lake.path))) == {"delta-rs"}  # a path table's: both writers via delta-rs
    lake.maintain()  # OPTIMIZE, checkpoint, log cleanup: the receipts live on in the receipts table only
    assert not any("lakescore_receipt" in str(h.get("userMetadata")) for h in DeltaTable(lake.path).history())
    assert seen_by_delta_rs(lake) == expected
    assert seen_by_spark(lake) == expected
    for engine in DIRECTIONS[0]:
        decision, version, _ = publish_by(engine, lake, later)
        assert decision.action == "noop" and version == DeltaTable(lake.path).version()


def spark_table_features(spark: Any, path: str) -> dict[str, Any]:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    return {"reader": detail["minReaderVersion"], "writer": detail["minWriterVersion"],
            "features": sorted(detail["tableFeatures"] or [])}


def test_delta_rs_reads_what_spark_wrote_after_a_period_replacement_optimize_and_checkpoint(lake, tmp_path):
    lake.configure(mode="snapshot", period_column="time_hour")
    spark = lake.runtime.spark()
    lake.add_source(lake.flights.iloc[:60])
    first = lake.score()
    assert publish_by("spark", lake, first)[0].action == "replace_period"  # v0: the commit creates the table
    lake.add_source(lake.flights.iloc[60:120])
    snapshot = lake.score()  # the whole source again: its days replace the table's (replaceWhere)
    decision, version, receipt = publish_by("spark", lake, snapshot)
    assert (decision.action, version) == ("replace_period", 1)
    assert receipt["period_start"] == snapshot.predictions["time_hour"].min().strftime("%Y-%m-%dT00:00:00Z")
    app_id = receipt["app_id"]

    spark.sql(f"ALTER TABLE delta.`{lake.path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '3', "
              "'delta.logRetentionDuration' = 'interval 0 seconds', "
              "'delta.deletedFileRetentionDuration' = 'interval 0 seconds')")  # v2
    spark.sql(f"OPTIMIZE delta.`{lake.path}`")  # v3, and a checkpoint at v3
    log = Path(lake.path) / "_delta_log"
    assert (log / f"{3:020d}.checkpoint.parquet").exists()
    assert [h["operation"] for h in sorted(DeltaTable(lake.path).history(), key=lambda h: h["version"])][-3:] == [
        "WRITE", "SET TBLPROPERTIES", "OPTIMIZE"]
    DeltaTable(lake.path).cleanup_metadata()  # v0..v2 leave the log (if Spark's own cleanup left them)

    table = DeltaTable(lake.path)
    assert table.version() == 3 and sorted(p.name for p in log.glob("*.json")) == [f"{3:020d}.json"]
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert spark_table_features(spark, lake.path) == {"reader": 1, "writer": 2, "features": ["appendOnly", "invariants"]}
    assert lake.runtime.unreadable_features(TARGET) == frozenset()
    assert table.transaction_version(app_id) == 1  # Spark's app transaction, read from Spark's checkpoint
    assert len(table.file_uris()) == 1  # compacted

    by_spark = spark.read.format("delta").load(lake.path)
    by_delta_rs = table.to_pyarrow_table()
    assert delta_schema(table.schema()) == tuple((f.name, f.dataType.typeName()) for f in by_spark.schema.fields)
    assert_df_equality(by_spark, spark.createDataFrame(by_delta_rs), ignore_row_order=True, ignore_nullable=True)

    # independent of both readers: the rows are the second snapshot's predictions, as scored in pandas
    stored = read_back(lake.path)
    expected = read_back(delta_rs.to_arrow(snapshot.predictions, run_id=snapshot.run_id))
    pd.testing.assert_frame_equal(stored[expected.columns], expected)
    assert set(stored["run_id"]) == {snapshot.run_id} and len(stored) == 120

    # the same run written by delta-rs into a table of its own reads back identical, types included
    twin = str(tmp_path / "written_by_delta_rs")
    assert publish_by("delta-rs", lake, snapshot, path=twin)[0].action == "replace_period"
    assert delta_schema(DeltaTable(twin).schema()) == delta_schema(table.schema())
    pd.testing.assert_frame_equal(read_back(twin), stored)


def read_back(source: str | pa.Table) -> pd.DataFrame:
    """The Delta table at ``source`` (read by delta-rs) or an Arrow table, in pandas as
    ``LocalRuntime.read_table`` gives it (nullable integers), ordered by flight_id."""
    from lakescore.frames import nullable_pandas_type

    data = DeltaTable(source).to_pyarrow_table() if isinstance(source, str) else source
    return data.to_pandas(types_mapper=nullable_pandas_type).sort_values("flight_id").reset_index(drop=True)
