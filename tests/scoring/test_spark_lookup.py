"""The Spark join of feature lookups, on a real local SparkSession: the same rows, worked by hand, as
the pandas join (tests/test_lookup.py), and the same refusals."""

import numpy as np
import pandas as pd
import pytest

from lakescore.errors import FeatureLookupError
from lakescore.lookup import FeatureLookup, join_all, join_features
from lakescore.scoring.spark_lookup import spark_join_all, spark_join_features

pytestmark = pytest.mark.spark
T = pd.Timestamp
WEATHER = FeatureLookup("main.flights.weather", ("origin",), ("temp", "visib"), (("temp", "origin_temp"),),
                        timestamp_lookup_key="time_hour")
PLANES = FeatureLookup("main.flights.planes", ("tailnum",), ("year",), (("year", "plane_year"),))


def _weather() -> pd.DataFrame:
    return pd.DataFrame({
        "origin": ["EWR", "EWR", "EWR", "JFK", None, "JFK"],
        "time_hour": [T("2013-01-01 05:00"), T("2013-01-01 06:00"), T("2013-01-01 08:00"), T("2013-01-01 05:00"),
                      T("2013-01-01 05:00"), pd.NaT],  # a null key and a null time: never matched
        "temp": [30.0, 31.0, 33.0, 40.0, 99.0, 77.0],
        "visib": [10, 9, 8, 7, 1, 2],
    })


def _rows() -> pd.DataFrame:
    return pd.DataFrame({
        "flight": np.arange(10, dtype="int64"),
        "origin": ["EWR", "EWR", "EWR", "EWR", "EWR", "JFK", "LGA", None, "EWR", "EWR"],
        "time_hour": [T("2013-01-01 04:59"),  # before every EWR row: nothing
                      T("2013-01-01 05:00"),  # exactly at 05:00: that row
                      T("2013-01-01 05:30"),  # between 05:00 and 06:00: 05:00, not 06:00
                      T("2013-01-01 07:59"),  # 06:00 (08:00 is in its future)
                      T("2013-01-02 00:00"),  # after the last: 08:00
                      T("2013-01-01 06:00"),  # JFK 05:00
                      T("2013-01-01 06:00"),  # no LGA rows
                      T("2013-01-01 06:00"),  # null key: nothing
                      pd.NaT,                 # null timestamp: nothing
                      T("2013-01-01 05:30")],  # the same key and time as flight 2: its own row, the same match
        "tailnum": ["N2", "N9", "N2", None, "N1", "N1", "N2", "N2", "N3", "N2"],
    })


def _planes() -> pd.DataFrame:
    return pd.DataFrame({"tailnum": ["N1", "N2", "N3", None], "year": [2001, 1999, 2010, 1900]})


def _on_spark(spark, frame: pd.DataFrame):
    return spark.createDataFrame(frame)


def _back(joined) -> pd.DataFrame:
    return joined.toPandas().sort_values("flight").reset_index(drop=True)


def test_a_point_in_time_join_on_spark_matches_the_hand_worked_rows_and_the_pandas_join(spark):
    out = spark_join_features(_on_spark(spark, _rows()), _on_spark(spark, _weather()), WEATHER)
    assert out.columns == ["flight", "origin", "time_hour", "tailnum", "origin_temp", "visib"]
    assert dict(out.dtypes)["visib"] == "double"  # the pandas join gives the chain float64 for an integer feature
    got = _back(out)
    assert got["flight"].tolist() == list(range(10))  # every row once
    np.testing.assert_array_equal(got["origin_temp"].to_numpy(dtype="float64"),
                                  [np.nan, 30.0, 30.0, 31.0, 33.0, 40.0, np.nan, np.nan, np.nan, 30.0])
    np.testing.assert_array_equal(got["visib"].to_numpy(dtype="float64"),
                                  [np.nan, 10, 10, 9, 8, 7, np.nan, np.nan, np.nan, 10])
    by_pandas = join_features(_rows(), _weather(), WEATHER)
    np.testing.assert_array_equal(got[["origin_temp", "visib"]].to_numpy(dtype="float64"),
                                  by_pandas[["origin_temp", "visib"]].to_numpy(dtype="float64"))


def test_an_exact_join_on_spark_gives_nulls_for_missing_or_null_keys_and_keeps_every_row_once(spark):
    out = spark_join_features(_on_spark(spark, _rows()), _on_spark(spark, _planes()), PLANES)
    assert dict(out.dtypes)["plane_year"] == "double"
    got = _back(out)
    np.testing.assert_array_equal(got["plane_year"].to_numpy(dtype="float64"),
                                  [1999, np.nan, 1999, np.nan, 2001, 2001, 1999, 1999, 2010, 1999])
    assert got["tailnum"].tolist() == _rows()["tailnum"].tolist()  # the rows' own keys, a null kept as null


def test_both_lookups_in_order_agree_with_the_pandas_join(spark):
    tables = {WEATHER.table_name: _weather(), PLANES.table_name: _planes()}
    got = _back(spark_join_all(_on_spark(spark, _rows()), {k: _on_spark(spark, v) for k, v in tables.items()},
                               [WEATHER, PLANES]))
    expected = join_all(_rows(), tables, [WEATHER, PLANES])
    assert list(got.columns) == list(expected.columns)
    np.testing.assert_array_equal(got[["origin_temp", "visib", "plane_year"]].to_numpy(dtype="float64"),
                                  expected[["origin_temp", "visib", "plane_year"]].to_numpy(dtype="float64"))


def test_the_spark_join_refuses_what_the_pandas_join_refuses(spark):
    planes = _planes().assign(tailnum=["N1", "N2", "N2", None])
    with pytest.raises(FeatureLookupError, match=r"main\.flights\.planes has 2 rows sharing a key \('tailnum',\) "
                                                 r"\(e\.g\. \{'tailnum': 'N2'\}\)"):
        spark_join_features(_on_spark(spark, _rows()), _on_spark(spark, planes), PLANES)
    weather = _weather()
    weather.loc[1, "time_hour"] = T("2013-01-01 05:00")
    with pytest.raises(FeatureLookupError, match=r"sharing a key \('origin', 'time_hour'\).*key and timestamp"):
        spark_join_features(_on_spark(spark, _rows()), _on_spark(spark, weather), WEATHER)
    with pytest.raises(FeatureLookupError, match=r"\['plane_year'\] already exist.*rename_outputs"):
        spark_join_features(_on_spark(spark, _rows().assign(plane_year=1.0)), _on_spark(spark, _planes()), PLANES)
    with pytest.raises(FeatureLookupError, match=r"the rows lack column\(s\) \['tailnum'\]"):
        spark_join_features(_on_spark(spark, _rows().drop(columns="tailnum")), _on_spark(spark, _planes()), PLANES)
    numeric_times = _weather().assign(time_hour=np.arange(6.0))
    with pytest.raises(FeatureLookupError, match=r"'time_hour' \(timestamp\) and feature_timestamp_key 'time_hour' "
                                                 r"\(double\) are not comparable times"):
        spark_join_features(_on_spark(spark, _rows()), _on_spark(spark, numeric_times), WEATHER)


def test_the_spark_join_refuses_a_time_with_a_zone_against_a_naive_time_as_the_pandas_join_does(spark):
    naive = _on_spark(spark, _weather()).selectExpr("origin", "CAST(time_hour AS timestamp_ntz) AS time_hour", "temp",
                                                    "visib")
    with pytest.raises(FeatureLookupError, match=r"main\.flights\.weather: the rows' 'time_hour' carries a time zone "
                                                 r"and feature table column 'time_hour' does not \(timestamp_lookup_key "
                                                 r"timestamp, feature_timestamp_key timestamp_ntz\)"):
        spark_join_features(_on_spark(spark, _rows()), naive, WEATHER)


def _asof(spark, rows: pd.DataFrame, table: pd.DataFrame, spec: FeatureLookup) -> pd.DataFrame:
    """The Spark join of ``rows`` (with a ``flight`` id) and ``table``, back in pandas by flight, after
    checking that the pandas join gives the same output values."""
    got = _back(spark_join_features(_on_spark(spark, rows), _on_spark(spark, table), spec))
    by_pandas = join_features(rows, table, spec)
    outputs = list(spec.output_columns)
    np.testing.assert_array_equal(got[outputs].to_numpy(dtype="float64"), by_pandas[outputs].to_numpy(dtype="float64"))
    return got


def test_a_null_value_in_the_latest_feature_row_wins_over_an_older_non_null_value(spark):
    weather = pd.DataFrame({"origin": ["EWR", "EWR", "EWR"],
                            "time_hour": [T("2013-01-01 05:00"), T("2013-01-01 06:00"), T("2013-01-01 07:00")],
                            "temp": [30.0, np.nan, np.nan],   # 06:00 and 07:00 have no temperature
                            "visib": [10.0, 9.0, np.nan]})    # 07:00 has no value at all
    rows = pd.DataFrame({"flight": [0, 1, 2, 3], "origin": ["EWR"] * 4,
                         "time_hour": [T("2013-01-01 05:30"), T("2013-01-01 06:30"), T("2013-01-01 07:00"),
                                       T("2013-01-01 09:00")]})
    got = _asof(spark, rows, weather, WEATHER)
    np.testing.assert_array_equal(got["origin_temp"].to_numpy(dtype="float64"), [30.0, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(got["visib"].to_numpy(dtype="float64"), [10.0, 9.0, np.nan, np.nan])


def test_a_feature_row_at_exactly_the_rows_time_is_taken_and_one_a_microsecond_later_is_not(spark):
    weather = pd.DataFrame({"origin": ["JFK", "JFK", "JFK"],
                            "time_hour": [T("2013-01-01 05:00"), T("2013-01-01 06:00"),
                                          T("2013-01-01 07:00:00.000001")],
                            "temp": [40.0, 41.0, 42.0], "visib": [7, 6, 5]})
    rows = pd.DataFrame({"flight": [0, 1, 2, 3], "origin": ["JFK"] * 4,
                         "time_hour": [T("2013-01-01 05:00"), T("2013-01-01 06:00"), T("2013-01-01 06:00"),
                                       T("2013-01-01 07:00")]})  # two rows share 06:00; 07:00 is 1 us early
    got = _asof(spark, rows, weather, WEATHER)
    np.testing.assert_array_equal(got["origin_temp"].to_numpy(dtype="float64"), [40.0, 41.0, 41.0, 41.0])
    np.testing.assert_array_equal(got["visib"].to_numpy(dtype="float64"), [7, 6, 6, 6])


def test_interleaved_keys_each_take_their_own_latest_row_and_a_row_before_its_keys_first_gets_nulls(spark):
    spec = FeatureLookup("main.flights.routes", ("origin", "dest"), ("delay",), timestamp_lookup_key="t")
    table = pd.DataFrame({"origin": ["EWR", "JFK", "EWR", "JFK", "EWR", "EWR"],
                          "dest": ["ORD", "ORD", "ATL", "ORD", "ORD", "ATL"],
                          "t": [1, 2, 3, 4, 5, 6],
                          "delay": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]})
    rows = pd.DataFrame({"flight": np.arange(8),
                         "origin": ["EWR", "JFK", "EWR", "EWR", "JFK", "EWR", "JFK", "EWR"],
                         "dest": ["ORD", "ORD", "ATL", "ORD", "ORD", "ATL", "ATL", "ORD"],
                         "t": [0, 1, 2, 4, 5, 6, 9, 9]})
    # flight 0: EWR-ORD at 0, before its first row (1); 1: JFK-ORD at 1, before 2; 2: EWR-ATL at 2, before 3;
    # 3: EWR-ORD at 4 -> t=1 (JFK's t=2 and t=4 and EWR-ATL's t=3 are other keys); 4: JFK-ORD at 5 -> t=4;
    # 5: EWR-ATL at 6 -> t=6 exactly; 6: JFK-ATL has no rows; 7: EWR-ORD at 9 -> t=5
    got = _asof(spark, rows, table, spec)
    np.testing.assert_array_equal(got["delay"].to_numpy(dtype="float64"),
                                  [np.nan, np.nan, np.nan, 10.0, 40.0, 60.0, np.nan, 50.0])
    assert got["t"].tolist() == rows["t"].tolist()


def test_number_times_of_two_types_compare_as_numbers_and_the_rows_keep_their_own_time_type(spark):
    spec = FeatureLookup("main.flights.routes", ("origin",), ("delay",), timestamp_lookup_key="t")
    table = pd.DataFrame({"origin": ["EWR", "EWR"], "t": [1.5, 3.0], "delay": [10, 20]})  # double times, int values
    rows = pd.DataFrame({"flight": np.arange(4), "origin": ["EWR"] * 4, "t": np.array([1, 2, 3, 4], dtype="int64")})
    out = spark_join_features(_on_spark(spark, rows), _on_spark(spark, table), spec)
    assert dict(out.dtypes)["t"] == "bigint" and dict(out.dtypes)["delay"] == "double"
    got = _asof(spark, rows, table, spec)
    np.testing.assert_array_equal(got["delay"].to_numpy(dtype="float64"), [np.nan, 10.0, 20.0, 20.0])
    assert got["t"].tolist() == [1, 2, 3, 4]


def test_a_row_time_a_double_cannot_hold_exactly_still_gets_its_features(spark):
    """Epoch nanoseconds (bigint) against double feature times: the as-of union widens the rows' times
    to double, where 1700000000000000001 becomes 1.7e18; the row must still get its feature row."""
    spec = FeatureLookup("main.flights.routes", ("origin",), ("delay",), timestamp_lookup_key="t")
    table = pd.DataFrame({"origin": ["EWR"], "t": [1.6e18], "delay": [5.0]})
    rows = pd.DataFrame({"flight": np.arange(2), "origin": ["EWR", "EWR"],
                         "t": np.array([1_700_000_000_000_000_001, 1_500_000_000_000_000_001], dtype="int64")})
    got = _asof(spark, rows, table, spec)
    assert got["t"].tolist() == [1_700_000_000_000_000_001, 1_500_000_000_000_000_001]
    np.testing.assert_array_equal(got["delay"].to_numpy(dtype="float64"), [5.0, np.nan])


DAILY = FeatureLookup("main.flights.daily", ("origin",), ("delays",), timestamp_lookup_key="time_hour",
                      feature_timestamp_key="day")
# the same wall clocks as tests/test_lookup.py's date case, hand-worked the same way: a date is midnight of its day
DAILY_TIMES = ["2013-01-01 23:59:59", "2013-01-02 00:00:00", "2013-01-02 01:00:00", "2013-01-01 23:00:00"]
DAILY_EXPECTED = [1.0, 2.0, 2.0, np.nan]  # before midnight: Jan 1; at and after: Jan 2; JFK has nothing on Jan 1


def test_a_date_feature_time_joins_timestamp_and_timestamp_ntz_rows_as_the_pandas_join_does(spark):
    from datetime import date

    daily = pd.DataFrame({"origin": ["EWR", "EWR", "JFK"], "day": [date(2013, 1, 1), date(2013, 1, 2), date(2013, 1, 2)],
                          "delays": [1.0, 2.0, 5.0]})
    rows = pd.DataFrame({"flight": np.arange(4, dtype="int64"), "origin": ["EWR", "EWR", "EWR", "JFK"],
                         "time_hour": pd.to_datetime(DAILY_TIMES)})
    table = _on_spark(spark, daily)
    assert dict(table.dtypes)["day"] == "date"
    aware = _on_spark(spark, rows)  # timestamp: the session (UTC) reads the naive pandas times as UTC
    naive = aware.selectExpr("flight", "origin", "CAST(time_hour AS timestamp_ntz) AS time_hour")
    for on_spark, in_pandas in ((aware, rows.assign(time_hour=rows["time_hour"].dt.tz_localize("UTC"))),
                                (naive, rows)):
        got = _back(spark_join_features(on_spark, table, DAILY))["delays"].to_numpy()
        np.testing.assert_array_equal(got, DAILY_EXPECTED)
        np.testing.assert_array_equal(join_features(in_pandas, daily, DAILY)["delays"].to_numpy(), got)


def test_a_number_against_a_date_is_not_comparable_in_either_join(spark):
    from datetime import date

    daily = pd.DataFrame({"origin": ["EWR"], "day": [date(2013, 1, 1)], "delays": [1.0]})
    rows = pd.DataFrame({"origin": ["EWR"], "time_hour": [1.5]})
    with pytest.raises(FeatureLookupError, match=r"'time_hour' \(double\) and feature_timestamp_key 'day' \(date\) "
                                                 r"are not comparable times"):
        spark_join_features(_on_spark(spark, rows), _on_spark(spark, daily), DAILY)
    with pytest.raises(FeatureLookupError, match=r"'time_hour' \(float64\) and feature_timestamp_key 'day' \(object\) "
                                                 r"are not comparable times"):
        join_features(rows, daily, DAILY)
