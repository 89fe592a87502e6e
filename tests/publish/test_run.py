"""``build_request`` (through the publish workflow) on real Delta tables: the last check before a commit."""

from __future__ import annotations

from datetime import UTC

import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake

from lakescore.errors import NullPeriodError

SOURCE = "main.flights.flights_incoming"  # config/inference.yml


def test_a_staged_snapshot_with_a_null_period_is_refused_and_the_table_is_unchanged(lake):
    lake.configure(mode="snapshot", period_column="time_hour")
    lake.add_source(lake.flights.iloc[:20])
    lake.publish(lake.score())
    before = lake.table().sort_values("flight_id").reset_index(drop=True)
    write_deltalake(str(lake.runtime.table_path(SOURCE)), lake.flights.iloc[:30], mode="overwrite")
    run = lake.score()  # staged by a lakescore that did not refuse null periods yet
    run.predictions.loc[[3, 7], "time_hour"] = pd.NaT
    with pytest.raises(NullPeriodError, match=(rf"scored run {run.run_id} of {SOURCE} v1 has 2 row\(s\) with a null "
                                               r"publication.period_column 'time_hour'")):
        lake.publish(run)
    assert DeltaTable(lake.path).version() == 1
    pd.testing.assert_frame_equal(lake.table().sort_values("flight_id").reset_index(drop=True), before)


@pytest.mark.spark
def test_facts_observed_while_staging_round_trip_through_run_json(route_spark, tmp_path):
    import json
    from datetime import date, datetime

    from lakescore.publish.run import observe_facts, saved_facts

    early, late = datetime(2013, 10, 1, 5, tzinfo=UTC), datetime(2013, 10, 3, 23, 59, tzinfo=UTC)
    frame = route_spark.createDataFrame([(1, late, date(2013, 10, 2)), (2, None, date(2013, 10, 1)), (3, early, None),
                                         (4, None, None)], "flight_id long, time_hour timestamp, day date")
    for column in ("time_hour", "day"):
        observed, facts = observe_facts(frame, column)
        observed.write.parquet(str(tmp_path / column))  # the staging write computes them: no pass of its own
        saved = json.loads(json.dumps(facts()))  # as run.json keeps them
        staged = route_spark.read.parquet(str(tmp_path / column))
        got = saved_facts(staged, saved, column)
        assert got.schema == (("flight_id", "long"), ("time_hour", "timestamp"), ("day", "date"))
        assert (got.rows, got.has_period, got.period_nulls) == (4, True, 2)
        if column == "time_hour":
            assert (got.period_low, got.period_high) == (pd.Timestamp("2013-10-01 05:00", tz="UTC"),
                                                         pd.Timestamp("2013-10-03 23:59", tz="UTC"))
        else:
            assert (got.period_low, got.period_high) == (date(2013, 10, 1), date(2013, 10, 2))
    assert saved_facts(staged, saved, "time_hour") is None  # observed for another column: count again
    assert saved_facts(staged, {}, "day") is None  # staged by an older lakescore
    observed, facts = observe_facts(frame, None)
    observed.write.parquet(str(tmp_path / "none"))
    plain = saved_facts(route_spark.read.parquet(str(tmp_path / "none")), json.loads(json.dumps(facts())), None)
    assert (plain.rows, plain.has_period, plain.period_nulls, plain.period_low) == (4, False, 0, None)
