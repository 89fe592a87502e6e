"""The delta-rs writer on real Delta tables: its receipt, its files and statistics, its key check.
The commit loop's behaviour on both writers is tested in test_commit.py."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
from deltalake import DeltaTable
from engines import stats_columns_in  # tests/publish/engines.py

from lakescore.publish.delta_rs import file_stats, normalize, repeated_keys
from lakescore.publish.layout import STATS_COLUMNS
from lakescore.publish.state import receipts

SOURCE, TARGET = "main.flights.flights_incoming", "main.flights.late_arrival_predictions"  # config/inference.yml


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

    assert json.loads(file_stats(data, frozenset({"k", "s"})))["minValues"] == {"k": 1, "s": "a"}
    assert set(json.loads(file_stats(data, frozenset({"k", "s"})))["nullCount"]) == {"k", "s"}


def test_a_table_it_creates_keeps_statistics_on_the_keys_run_id_and_model_version_only(lake):
    lake.add_source(lake.flights.iloc[:200])
    lake.publish(lake.score())
    assert DeltaTable(lake.path).metadata().configuration == {STATS_COLUMNS: "flight_id,run_id,model_version"}
    lake.add_source(lake.flights.iloc[200:260])
    lake.publish(lake.score())  # its files written by lakescore (write_files), as every append's
    assert len(DeltaTable(lake.path).file_uris()) == 2
    assert stats_columns_in(lake.path) == {"flight_id", "run_id", "model_version"}


def test_a_table_that_exists_keeps_its_own_properties_and_statistics(lake):
    from lakescore.publish.delta_rs import to_arrow

    lake.add_source(lake.flights.iloc[:200])
    run = lake.score()
    DeltaTable.create(lake.path, to_arrow(run.predictions, run_id=run.run_id).schema)  # made before lakescore's first run
    assert lake.publish(run).action == "append"
    assert DeltaTable(lake.path).metadata().configuration == {}
    assert {"flight_id", "prediction", "scoring_status", "run_id", "model_name"} <= stats_columns_in(lake.path)


def test_repeated_keys_on_arrow_within_the_run_first_then_against_the_table():
    new = pa.table({"k": [5, 1, 3, 9, 7], "s": ["a", "b", "a", "c", "a"]})
    assert repeated_keys(new, pa.table({"k": [2, 4]}), keys=["k"], table="t") is None
    assert repeated_keys(new, None, keys=["k"], table="t") is None
    held = repeated_keys(new, pa.table({"k": [9, 9, 3, 8, 1, 7]}), keys=["k"], table="t")
    assert (held.count, held.examples, held.where) == (4, ({"k": 1}, {"k": 3}, {"k": 7}), "already in t")
    twice = repeated_keys(pa.table({"k": [7, 7, 8, 2, 2, 2], "s": ["x", "y", "z", "x", "x", "y"]}),
                          pa.table({"k": [8]}), keys=["k"], table="t")
    assert (twice.count, twice.examples, twice.where) == (2, ({"k": 2}, {"k": 7}), "within this run")
    held_only = repeated_keys(pa.table({"k": [7, 7, 8]}), pa.table({"k": [8]}), keys=["k"], table="t", within=False)
    assert (held_only.count, held_only.where) == (1, "already in t")  # the rows' own repeats not counted again
    pairs = repeated_keys(new, None, keys=["s", "k"], table="t")  # a compound key: every pair is distinct
    assert pairs is None
    assert repeated_keys(new, None, keys=["s"], table="t").examples == ({"s": "a"},)
