"""Before scoring, on real Delta tables: a snapshot whose period column has nulls is refused."""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake

from lakescore.errors import NullPeriodError
from lakescore.publish.state import receipts

SOURCE = "main.flights.flights_incoming"  # config/inference.yml


def _four_rows(lake, kind: str, *, null: bool) -> pd.DataFrame:
    rows = lake.flights.iloc[:4].copy()
    rows["sched_ts"] = rows["time_hour"] if kind == "timestamp" else rows["time_hour"].dt.date
    if null:
        rows.loc[rows.index[2], "sched_ts"] = None
    return rows.reset_index(drop=True)


@pytest.mark.parametrize("kind", ["timestamp", "date"])
def test_null_snapshot_period_is_refused_before_scoring_naming_column_and_count(lake, kind):
    lake.configure(mode="snapshot", period_column="sched_ts")
    lake.add_source(_four_rows(lake, kind, null=True))
    for _ in range(2):  # every run says the same, and nothing is created
        with pytest.raises(NullPeriodError) as err:
            lake.score()
        assert err.value.code == "period_null"
        assert str(err.value).startswith(
            f"{SOURCE} v0 has 1 row(s) with a null publication.period_column 'sched_ts'. A snapshot replaces")
        assert "set publication.mode: incremental" in str(err.value)
        assert not DeltaTable.is_deltatable(lake.path)
    source = lake.runtime.table_path(SOURCE)
    clean = _four_rows(lake, kind, null=False)
    write_deltalake(str(source), clean, mode="overwrite")
    published = lake.publish(lake.score())
    assert (published.action, published.table_version) == ("replace_period", 1)
    before = lake.table().sort_values("flight_id").reset_index(drop=True)
    write_deltalake(str(source), _four_rows(lake, kind, null=True), mode="overwrite")
    with pytest.raises(NullPeriodError, match=f"{SOURCE} v2 has 1 row"):
        lake.score()
    assert DeltaTable(lake.path).version() == 1
    pd.testing.assert_frame_equal(lake.table().sort_values("flight_id").reset_index(drop=True), before)
    assert len(before) == 4 and before["sched_ts"].notna().all()
    assert DeltaTable(str(source)).version() == 2 and [r["table_version"] for r in receipts(lake.path)] == [1]


def test_null_period_is_allowed_in_incremental_mode(lake):
    lake.configure(period_column="sched_ts")  # incremental: appended, never filtered on the period
    lake.add_source(_four_rows(lake, "timestamp", null=True))
    done = lake.publish(lake.score())
    assert done.action == "append"
    assert lake.assert_whole()["sched_ts"].isna().sum() == 1
