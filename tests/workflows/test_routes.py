"""The route a run takes, chosen once from batch_compute and the placement; and what each route
counts where its rows are: how many source rows find no feature row (the demo's "no feature row"
lines), in pandas and in Spark alike."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from lakescore.errors import FeatureLookupError
from lakescore.lookup import FeatureLookup
from lakescore.workflows.routes import choose_route

SOURCE, PLANES, WEATHER = "main.t.rows", "main.t.planes", "main.t.weather"
PLANE = FeatureLookup(PLANES, ("tailnum",), ("seats",))
WEATHER_AT = FeatureLookup(WEATHER, ("origin",), ("temp",), timestamp_lookup_key="time_hour")


def _tables(runtime) -> None:
    at = pd.to_datetime(["2013-01-01 10:00", "2013-01-01 08:00", "2013-01-01 12:00", "2013-01-01 10:00", None],
                        utc=True)
    runtime.write_table(SOURCE, pd.DataFrame({"tailnum": ["A", "B", None, "C", "A"],
                                              "origin": ["X", "X", "Y", None, "X"], "time_hour": at}))
    runtime.write_table(PLANES, pd.DataFrame({"tailnum": ["A", "C", "D"], "seats": [100, 150, 200]}))
    runtime.write_table(WEATHER, pd.DataFrame({"origin": ["X", "X", "Z"], "temp": [1.0, 2.0, 3.0],
                                               "time_hour": pd.to_datetime(["2013-01-01 09:00", "2013-01-01 11:00",
                                                                            "2013-01-01 01:00"], utc=True)}))


# worked by hand: planes misses B and the null tailnum (2 of 5); weather matches only (X, 10:00),
# since X's first observation is 09:00, Y has none, and a null origin or time matches nothing (4 of 5)
EXPECTED = {f"{PLANES} by tailnum": 2, f"{WEATHER} by origin, time_hour": 4}


def test_rows_without_a_feature_row_are_counted_in_pandas(runtime) -> None:
    _tables(runtime)
    assert choose_route(runtime, "single_node").unmatched_rows(
        SOURCE, [PLANE, WEATHER_AT], version=0, versions={PLANES: 0, WEATHER: 0}) == EXPECTED


@pytest.mark.spark
def test_rows_without_a_feature_row_are_counted_in_spark_as_in_pandas(spark_runtime) -> None:
    _tables(spark_runtime)
    assert choose_route(spark_runtime, "spark").unmatched_rows(
        SOURCE, [PLANE, WEATHER_AT], version=0, versions={PLANES: 0, WEATHER: 0}) == EXPECTED


def test_a_naive_feature_time_against_utc_rows_is_refused_as_the_join_refuses_it(runtime) -> None:
    """Rows with UTC times against a feature table with naive times: which zone the naive times
    are in is unknown, so the count refuses, as :func:`lakescore.lookup.join_features` does."""
    _tables(runtime)
    naive = pd.DataFrame({"origin": ["X", "X", "Z"], "temp": [1.0, 2.0, 3.0],
                          "time_hour": pd.to_datetime(["2013-01-01 09:00", "2013-01-01 11:00", "2013-01-01 01:00"])})
    runtime.write_table("main.t.weather_naive", naive)
    spec = FeatureLookup("main.t.weather_naive", ("origin",), ("temp",), timestamp_lookup_key="time_hour")
    with pytest.raises(FeatureLookupError, match=r"main\.t\.weather_naive: the rows' 'time_hour' carries a time zone "
                                                 r"and feature table column 'time_hour' does not"):
        choose_route(runtime, "single_node").unmatched_rows(
            SOURCE, [spec], version=0, versions={"main.t.weather_naive": 0})


DAILY = FeatureLookup("main.t.daily", ("origin",), ("temp",), timestamp_lookup_key="time_hour",
                      feature_timestamp_key="day")


def _daily(runtime) -> None:
    """A Delta ``date`` feature time: X from Jan 1, Y from Jan 2 (the rows are all on Jan 1, UTC)."""
    runtime.write_table("main.t.daily", pd.DataFrame({"origin": ["X", "Y"], "temp": [1.0, 2.0],
                                                      "day": [date(2013, 1, 1), date(2013, 1, 2)]}))


# worked by hand: the two X rows with a time (10:00, 08:00 UTC) match X's Jan 1 (its midnight UTC is before);
# Y's first day is Jan 2, after its Jan 1 12:00 row; the null origin and X's null time match nothing (3 of 5)
DAILY_EXPECTED = {"main.t.daily by origin, time_hour": 3}


def test_a_date_feature_time_is_counted_as_midnight_utc_against_utc_rows(runtime) -> None:
    _tables(runtime)
    _daily(runtime)
    assert choose_route(runtime, "single_node").unmatched_rows(
        SOURCE, [DAILY], version=0, versions={"main.t.daily": 0}) == DAILY_EXPECTED


@pytest.mark.spark
def test_a_date_feature_time_is_counted_in_spark_as_in_pandas(spark_runtime) -> None:
    _tables(spark_runtime)
    _daily(spark_runtime)
    assert choose_route(spark_runtime, "spark").unmatched_rows(
        SOURCE, [DAILY], version=0, versions={"main.t.daily": 0}) == DAILY_EXPECTED
