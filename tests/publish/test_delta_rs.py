"""The local writer on real Delta tables: modes, replay, conflicts, model and schema changes."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakescore.errors import (
    ModelChangeError,
    PublishConflictError,
    SchemaChangeError,
    SourceChangedError,
    StalePlanError,
)
from lakescore.publish.delta_rs import file_stats, normalize
from lakescore.publish.state import receipts

SOURCE, TARGET = "main.flights.flights_incoming", "main.flights.late_arrival_predictions"  # config/inference.yml


def test_incremental_appends_inserted_rows_once_and_replays_are_noops(lake):
    lake.add_source(lake.flights.iloc[:300])
    first = lake.score()
    assert lake.publish(first).table_version == 1
    lake.add_source(lake.flights.iloc[300:400])
    lake.add_source(lake.flights.iloc[400:450])
    window = lake.score()
    assert len(window.predictions) == 150  # v1 and v2 inserted rows only
    done = lake.publish(window)
    assert (done.action, done.table_version) == ("append", 2)
    assert (done.receipt["source_version_from"], done.receipt["source_version_to"]) == (1, 2)
    again = lake.publish(window)
    assert again.action == "noop" and again.message.startswith("replay: no-op (run ")
    assert again.table_version == 2 and again.receipt["run_id"] == window.run_id
    idle = lake.score()
    assert idle.scope["action"] == "noop" and "no new versions" in lake.publish(idle).message
    lake.assert_whole()
    assert DeltaTable(lake.path).version() == 2


def test_receipt_fields(lake):
    lake.add_source(lake.flights.iloc[:200])
    run = lake.score()
    lake.publish(run)
    (receipt,) = receipts(lake.path)
    excluded = int((run.predictions["scoring_status"] == "excluded").sum())
    assert excluded > 0
    source_id = DeltaTable(str(lake.runtime.table_path(SOURCE))).metadata().id
    expected = {"run_id": run.run_id, "source_table": SOURCE, "source_table_id": source_id,
                "source_version_from": None, "source_version_to": 0, "target_table": TARGET,
                "target_table_id": DeltaTable(lake.path).metadata().id, "model_name": "main.flights.late_arrival",
                "model_version": 1, "artifact_sha256": "artifact-1", "certificate_sha256": "certificate-1",
                "rows_in": 200, "predicted": 200 - excluded, "excluded": excluded, "batch_compute": "single_node",
                "env_manager": "local", "batch_rows": 10000, "mode": "incremental", "action": "append",
                "watermark_before": None, "watermark_after": 0, "table_version": 1, "txn_version": 1,
                "recovery": None}
    assert {k: receipt[k] for k in expected} == expected
    assert len(receipt["request_digest"]) == 64
    assert DeltaTable(lake.path).transaction_version(receipt["app_id"]) == 1


def test_same_run_id_with_a_different_request_is_a_conflict(lake):
    lake.add_source(lake.flights.iloc[:100])
    run = lake.score()
    lake.publish(run)
    lake.add_source(lake.flights.iloc[100:150])
    later = lake.score()
    reused = type(later)(run.run_id, later.plan, later.batch_compute, later.env_manager, later.batch_rows,
                         later.predictions, later.scope)
    with pytest.raises(PublishConflictError, match=f"run {run.run_id} was already published"):
        lake.publish(reused)
    assert len(lake.table()) == 100


def test_stale_window_fails_and_covered_window_is_a_noop(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:150])
    early = lake.score()  # window v1..v1
    lake.add_source(lake.flights.iloc[150:200])
    late = lake.score()  # window v1..v2, published first
    lake.publish(late)
    covered = lake.publish(early)
    assert covered.action == "noop" and "already holds" in covered.message
    lake.add_source(lake.flights.iloc[200:230])
    partial = lake.score()  # window v3..v3
    lake.add_source(lake.flights.iloc[230:260])
    stale = lake.score()  # window v3..v4, planned while the watermark was v2
    lake.publish(partial)
    with pytest.raises(StalePlanError, match=r"up to v3, and this run read v3..v4"):
        lake.publish(stale)
    assert len(lake.table()) == 230
    lake.publish(lake.score())  # re-planned: window v4..v4
    lake.assert_whole()


def test_model_change_incremental_append_keeps_old_versions(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score(model_version=1))
    lake.add_source(lake.flights.iloc[100:160])
    lake.publish(lake.score(model_version=2))
    table = lake.assert_whole()
    counts = table.groupby("model_version").size().to_dict()
    assert counts == {1: 100, 2: 60}
    assert set(table.loc[table["flight_id"].isin(lake.flights["flight_id"].iloc[:100]), "model_version"]) == {1}


def test_model_change_reject_and_full_rebuild(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score(model_version=1))
    lake.add_source(lake.flights.iloc[100:160])
    lake.configure(model_change_mode="reject")
    with pytest.raises(ModelChangeError, match="model_change_mode is 'reject'"):
        lake.score(model_version=2)
    lake.configure(model_change_mode="full_rebuild")
    rebuilt = lake.publish(lake.score(model_version=2))
    assert rebuilt.action == "replace_table"
    table = lake.assert_whole()
    assert set(table["model_version"]) == {2}
    assert DeltaTable(lake.path).version() == 2  # one commit replaced the table


def test_schema_change_is_refused_until_migrate(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:130])
    wider = lake.score(model_version=2, extra="segment")
    with pytest.raises(SchemaChangeError, match=r"new: \['segment'\].*lakescore publish --migrate"):
        lake.publish(wider)
    assert len(lake.table()) == 100
    assert lake.publish(wider, migrate=True).receipt["schema_mode"] == "merge"
    table = lake.assert_whole()
    assert table["segment"].isna().sum() == 100 and (table["segment"] == "x").sum() == 30


def test_update_in_window_is_rejected_naming_versions_or_rebuilt(lake):
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    lake.add_source(lake.flights.iloc[100:120])
    DeltaTable(str(lake.runtime.table_path(SOURCE))).delete("flight_id = " + str(int(lake.flights["flight_id"][0])))
    with pytest.raises(SourceChangedError, match=r"window v1..v2 \(v2: delete\)"):
        lake.score()
    lake.configure(source_change_policy="rebuild_on_change")
    run = lake.score()
    assert lake.publish(run).action == "replace_table"
    lake.assert_whole()
    assert len(lake.table()) == 119


def test_empty_window_publishes_nothing_unless_allowed(lake):
    lake.add_source(lake.flights.iloc[:50])
    lake.publish(lake.score())
    source = DeltaTable(str(lake.runtime.table_path(SOURCE)))
    source.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})  # no inserted rows
    run = lake.score()
    assert run.scope["reason"].startswith("no-op: no inserted rows in")
    assert lake.publish(run).action == "noop" and DeltaTable(lake.path).version() == 1
    lake.configure(allow_empty=True)
    empty = lake.publish(lake.score())
    assert (empty.action, empty.table_version, empty.receipt["watermark_after"]) == ("append", 2, 1)
    lake.assert_whole()


def test_snapshot_replaces_the_period_in_one_commit(lake):
    lake.configure(mode="snapshot", period_column="time_hour")
    flights = lake.flights.sort_values("time_hour").reset_index(drop=True)
    quarter = flights[flights["time_hour"] >= pd.Timestamp("2013-10-01", tz="UTC")].reset_index(drop=True)
    lake.add_source(quarter)
    lake.publish(lake.score())
    assert len(lake.table()) == len(quarter)
    # the next snapshot holds the first half of October, less every fifth flight
    half = quarter[quarter["time_hour"] < pd.Timestamp("2013-10-16", tz="UTC")]
    half = half[half.index % 5 != 0].reset_index(drop=True)
    write_deltalake(str(lake.runtime.table_path(SOURCE)), half, mode="overwrite")
    run = lake.score(model_version=2)
    done = lake.publish(run)
    assert (done.action, done.table_version) == ("replace_period", 2)
    end = half["time_hour"].max().floor("D") + pd.Timedelta(days=1)
    assert (done.receipt["period_start"], done.receipt["period_end"]) == (
        "2013-10-01T00:00:00Z", end.strftime("%Y-%m-%dT%H:%M:%SZ"))
    kept = quarter[quarter["time_hour"] >= end]
    table = lake.assert_whole(pd.concat([half["flight_id"], kept["flight_id"]]))
    versions = table.set_index("flight_id")["model_version"]
    assert set(versions[half["flight_id"]]) == {2} and set(versions[kept["flight_id"]]) == {1}
    assert lake.publish(run).action == "noop"


def test_empty_snapshot_never_wipes_a_period(lake):
    lake.configure(mode="snapshot", period_column="time_hour")
    lake.add_source(lake.flights.iloc[:100])
    lake.publish(lake.score())
    write_deltalake(str(lake.runtime.table_path(SOURCE)), lake.flights.iloc[:0], mode="overwrite")
    result = lake.publish(lake.score())
    assert result.action == "noop" and "gave no rows" in result.message
    assert len(lake.table()) == 100


def test_file_stats_and_normalize():
    data = normalize(pa.Table.from_pandas(pd.DataFrame({
        "k": [3, 1, 2], "p": [0.5, None, 0.25], "s": ["b", None, "a"],
        "t": pd.to_datetime(["2013-10-01 05:00", "2013-10-02 00:00", "2013-10-01 00:00"], utc=True)})))
    assert data.schema.field("t").type == pa.timestamp("us", tz="UTC") and data.schema.metadata is None
    stats = json.loads(file_stats(data))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {"k": 1, "p": 0.25, "s": "a", "t": "2013-10-01T00:00:00Z"}
    assert stats["maxValues"] == {"k": 3, "p": 0.5, "s": "b", "t": "2013-10-02T00:00:00Z"}
    assert stats["nullCount"] == {"k": 0, "p": 1, "s": 1, "t": 0}


def test_a_source_that_reinserts_published_rows_is_refused_and_the_table_is_unchanged(lake):
    from lakescore.errors import PublishError

    lake.add_source(lake.flights.iloc[:200])
    assert lake.publish(lake.score()).table_version == 1
    lake.add_source(lake.flights.iloc[150:210])  # 50 keys published already, 10 new
    with pytest.raises(PublishError, match=r"50 record key\(s\) already in main.flights.late_arrival_predictions"):
        lake.publish(lake.score())
    assert DeltaTable(lake.path).version() == 1
    stored = lake.table()
    assert len(stored) == 200 and stored["flight_id"].is_unique
