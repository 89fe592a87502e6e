"""A lost change-feed window (the feed no longer covers the versions) against any other failure to
read a feed, on real Delta tables, through both readers: delta-rs (``LocalRuntime.read_changes``)
and Delta Spark (``spark_changes`` and ``spark_change_kinds``)."""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import DeltaTable

from lakescore.errors import ChangeFeedQueryError, ChangeFeedReadError
from lakescore.publish.state import spark_change_kinds
from lakescore.runtime import LocalRuntime

CDF = {"configuration": {"delta.enableChangeDataFeed": "true"}}


def _table(runtime: LocalRuntime, name: str, *, cdf: bool = True) -> None:
    runtime.write_table(name, pd.DataFrame({"k": [1, 2], "v": [1.0, 2.0]}), **(CDF if cdf else {}))  # v0
    for k in (3, 4):
        runtime.write_table(name, pd.DataFrame({"k": [k], "v": [float(k)]}), mode="append")  # v1, v2


def _clean_log(runtime: LocalRuntime, name: str) -> None:
    """Leave the log starting at a checkpoint after v2, as log retention leaves it."""
    DeltaTable(str(runtime.table_path(name))).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds"})  # v3
    DeltaTable(str(runtime.table_path(name))).create_checkpoint()
    DeltaTable(str(runtime.table_path(name))).cleanup_metadata()


def test_a_column_the_table_lacks_is_named_and_not_a_lost_window(tmp_path):
    runtime, name = LocalRuntime(tmp_path), "main.s.feed"
    _table(runtime, name)
    with pytest.raises(ChangeFeedQueryError) as err:
        runtime.read_changes(name, first=1, last=2, columns=["k", "temp"])
    assert err.value.code == "change_feed_read_failed"
    assert str(err.value).startswith("reading the change data feed of main.s.feed for versions 1..2 failed "
                                     "(columns read: k, temp): Schema error: No field named temp.")
    assert "not a lost window" in str(err.value) and err.value.__cause__ is not None
    assert len(runtime.read_changes(name, first=1, last=2, columns=["k"])) == 2  # the feed itself is there


def test_a_cleaned_log_is_a_lost_window_on_delta_rs(tmp_path):
    runtime, name = LocalRuntime(tmp_path), "main.s.cleaned"
    _table(runtime, name)
    _clean_log(runtime, name)
    with pytest.raises(ChangeFeedReadError, match=r"the change data feed of main.s.cleaned cannot be read for "
                                                  r"versions 1\.\.3 \(External error: Invalid table version: 1\)"):
        runtime.read_changes(name, first=1, last=3, columns=["k"])  # v3 is the source's pinned version


@pytest.mark.spark
def test_an_unresolved_column_on_spark_is_named_and_not_a_lost_window(spark_runtime):
    runtime, name = spark_runtime, "main.s.spark_feed"
    _table(runtime, name)
    with pytest.raises(ChangeFeedQueryError, match=r"versions 1\.\.2 failed \(columns read: k, temp\): "
                                                   r"\[UNRESOLVED_COLUMN\.WITH_SUGGESTION\] .*`temp` cannot be resolved"):
        runtime.spark_changes(name, first=1, last=2, columns=["k", "temp"])


@pytest.mark.spark
def test_a_feed_not_recorded_or_vacuumed_or_cleaned_is_a_lost_window_on_spark(spark_runtime):
    runtime = spark_runtime
    _table(runtime, "main.s.no_cdf", cdf=False)  # the feed was never recorded for these versions
    changes = runtime.spark_changes("main.s.no_cdf", first=1, last=2, columns=["k"])
    with pytest.raises(ChangeFeedReadError, match=r"versions 1\.\.2 \(\[DELTA_MISSING_CHANGE_DATA\]"):
        spark_change_kinds(changes, table="main.s.no_cdf", first=1, last=2)

    _table(runtime, "main.s.vacuumed")
    for data_file in runtime.table_path("main.s.vacuumed").glob("*.parquet"):  # as a VACUUM would leave it
        data_file.unlink()
    changes = runtime.spark_changes("main.s.vacuumed", first=1, last=2, columns=["k"])
    with pytest.raises(ChangeFeedReadError, match=r"versions 1\.\.2 \(.*\[FAILED_READ_FILE\.FILE_NOT_EXIST\]"):
        spark_change_kinds(changes, table="main.s.vacuumed", first=1, last=2)

    _table(runtime, "main.s.spark_cleaned")
    _clean_log(runtime, "main.s.spark_cleaned")
    with pytest.raises(ChangeFeedReadError, match=r"versions 1\.\.2 \(.*\[DELTA_LOG_FILE_NOT_FOUND\]"):
        runtime.spark_changes("main.s.spark_cleaned", first=1, last=2, columns=["k"])
