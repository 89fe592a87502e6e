"""Feature lookups: the spec's JSON round trip and the pandas join, checked against rows worked by hand."""

import json
from datetime import date, datetime

import numpy as np
import pandas as pd
import pytest

from lakescore.errors import FeatureLookupError
from lakescore.lookup import FeatureLookup, join_all, join_features, lookup_inputs, time_kind

T = pd.Timestamp


def _weather() -> pd.DataFrame:
    return pd.DataFrame({
        "origin": ["EWR", "EWR", "EWR", "JFK", None],
        "time_hour": [T("2013-01-01 05:00"), T("2013-01-01 06:00"), T("2013-01-01 08:00"), T("2013-01-01 05:00"),
                      T("2013-01-01 05:00")],
        "temp": [30.0, 31.0, 33.0, 40.0, 99.0],
        "visib": [10, 9, 8, 7, 1],
    })


WEATHER = FeatureLookup("main.flights.weather", ("origin",), ("temp", "visib"), (("temp", "origin_temp"),),
                        timestamp_lookup_key="time_hour")


def test_the_spec_round_trips_through_json_exactly():
    spec = FeatureLookup("main.flights.weather", ("origin", "dest"), ("temp",), (("temp", "t"),),
                         timestamp_lookup_key="sched", feature_timestamp_key="time_hour")
    assert FeatureLookup.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert WEATHER.feature_timestamp_key == "time_hour"  # defaults to the rows' timestamp column
    assert FeatureLookup.from_json(json.loads(json.dumps(WEATHER.to_json()))) == WEATHER
    assert FeatureLookup.from_json({"table_name": "a.b.c", "lookup_key": "k", "feature_names": ["x"]}).lookup_key == ("k",)


def test_a_point_in_time_lookup_never_reads_a_feature_row_from_the_future():
    rows = pd.DataFrame({
        "origin": ["EWR", "EWR", "EWR", "EWR", "EWR", "JFK", "LGA", None, "EWR"],
        "time_hour": [T("2013-01-01 04:59"),  # before every EWR row: nothing
                      T("2013-01-01 05:00"),  # exactly at 05:00: that row
                      T("2013-01-01 05:30"),  # between 05:00 and 06:00: 05:00, not 06:00
                      T("2013-01-01 07:59"),  # 06:00 (08:00 is in its future)
                      T("2013-01-02 00:00"),  # after the last: 08:00
                      T("2013-01-01 06:00"),  # JFK 05:00
                      T("2013-01-01 06:00"),  # no LGA rows
                      T("2013-01-01 06:00"),  # null key: nothing (the feature row with a null origin never matches)
                      pd.NaT],                # null timestamp: nothing
        "dep_delay": np.arange(9.0),
    }, index=[90, 80, 70, 60, 50, 40, 30, 20, 10])
    out = join_features(rows, _weather(), WEATHER)
    assert list(out.index) == [90, 80, 70, 60, 50, 40, 30, 20, 10]
    assert list(out.columns) == ["origin", "time_hour", "dep_delay", "origin_temp", "visib"]
    np.testing.assert_array_equal(out["origin_temp"].to_numpy(),
                                  [np.nan, 30.0, 30.0, 31.0, 33.0, 40.0, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(out["visib"].to_numpy(), [np.nan, 10, 10, 9, 8, 7, np.nan, np.nan, np.nan])
    assert out["visib"].dtype == "float64"
    pd.testing.assert_frame_equal(out[list(rows.columns)], rows)


def test_an_exact_lookup_gives_nulls_for_missing_keys_and_keeps_every_row_once():
    planes = pd.DataFrame({"tailnum": ["N1", "N2", "N3", None], "year": [2001, 1999, 2010, 1900],
                           "seats": [100, 200, 300, 1]})
    spec = FeatureLookup("main.flights.planes", ("tailnum",), ("year",), (("year", "plane_year"),))
    rows = pd.DataFrame({"tailnum": ["N2", "N9", "N2", None, "N1"], "year": [2013] * 5}, index=list("abcde"))
    out = join_features(rows, planes, spec)
    assert list(out.index) == list("abcde")
    np.testing.assert_array_equal(out["plane_year"].to_numpy(), [1999, np.nan, 1999, np.nan, 2001])
    assert out["year"].tolist() == [2013] * 5  # the rows' own column, untouched


def test_duplicate_feature_keys_are_refused_naming_the_table_the_key_and_one_duplicate():
    planes = pd.DataFrame({"tailnum": ["N1", "N2", "N2"], "seats": [1, 2, 3]})
    spec = FeatureLookup("main.flights.planes", ("tailnum",), ("seats",))
    with pytest.raises(FeatureLookupError, match=r"main\.flights\.planes has 2 rows sharing a key \('tailnum',\) "
                                                 r"\(e\.g\. \{'tailnum': 'N2'\}\)"):
        join_features(pd.DataFrame({"tailnum": ["N1"]}), planes, spec)
    weather = _weather()
    weather.loc[1, "time_hour"] = T("2013-01-01 05:00")
    with pytest.raises(FeatureLookupError, match=r"key and timestamp"):
        join_features(pd.DataFrame({"origin": ["EWR"], "time_hour": [T("2013-01-01 09:00")]}), weather, WEATHER)


def test_a_time_with_a_zone_against_a_naive_time_is_refused_naming_the_table_the_columns_and_a_fix():
    aware_rows = pd.DataFrame({"origin": ["EWR"], "time_hour": [T("2013-01-01 06:30", tz="UTC")]})
    with pytest.raises(FeatureLookupError, match=r"main\.flights\.weather: the rows' 'time_hour' carries a time zone "
                                                 r"and feature table column 'time_hour' does not .*store both as UTC"):
        join_features(aware_rows, _weather(), WEATHER)
    iso_rows = pd.DataFrame({"origin": ["EWR"], "time_hour": ["2013-01-01T06:30:00"]})  # text without an offset
    utc_weather = _weather().assign(time_hour=_weather()["time_hour"].dt.tz_localize("UTC"))
    with pytest.raises(FeatureLookupError, match=r"feature table column 'time_hour' carries a time zone and the "
                                                 r"rows' 'time_hour' does not"):
        join_features(iso_rows, utc_weather, WEATHER)


def test_times_in_two_zones_are_compared_as_instants_not_wall_clocks():
    utc_weather = _weather().assign(time_hour=_weather()["time_hour"].dt.tz_localize("UTC"))
    # 07:30 at +02:00 is 05:30 UTC: EWR's 05:00 row (30.0); its wall clock would pick 06:00 (31.0)
    rows = pd.DataFrame({"origin": ["EWR", "EWR"], "time_hour": ["2013-01-01T07:30:00+02:00", "2013-01-01T05:59:00+00:00"]})
    out = join_features(rows, utc_weather, WEATHER)
    assert out["origin_temp"].tolist() == [30.0, 30.0]


def test_an_output_column_that_exists_is_refused_with_rename_outputs_as_the_fix():
    spec = FeatureLookup("main.flights.planes", ("tailnum",), ("year",))
    rows = pd.DataFrame({"tailnum": ["N1"], "year": [2013]})
    with pytest.raises(FeatureLookupError, match=r"\['year'\] already exist.*rename_outputs, e\.g\. "
                                                 r"\{'year': 'year_planes'\}"):
        join_features(rows, pd.DataFrame({"tailnum": ["N1"], "year": [2001]}), spec)


def test_a_missing_column_is_refused_naming_it():
    spec = FeatureLookup("main.flights.planes", ("tailnum",), ("seats",))
    with pytest.raises(FeatureLookupError, match=r"the rows lack column\(s\) \['tailnum'\]"):
        join_features(pd.DataFrame({"x": [1]}), pd.DataFrame({"tailnum": ["N1"], "seats": [1]}), spec)
    with pytest.raises(FeatureLookupError, match=r"planes has no column\(s\) \['seats'\]"):
        join_features(pd.DataFrame({"tailnum": ["N1"]}), pd.DataFrame({"tailnum": ["N1"]}), spec)


def test_join_all_and_the_source_columns_a_lookup_chain_needs():
    planes = FeatureLookup("main.flights.planes", ("tailnum",), ("seats",))
    rows = pd.DataFrame({"origin": ["EWR"], "time_hour": [T("2013-01-01 06:30")], "tailnum": ["N1"]})
    out = join_all(rows, {"main.flights.weather": _weather(),
                          "main.flights.planes": pd.DataFrame({"tailnum": ["N1"], "seats": [50]})}, [WEATHER, planes])
    assert out[["origin_temp", "visib", "seats"]].iloc[0].tolist() == [31.0, 9.0, 50.0]
    assert lookup_inputs([WEATHER, planes], ("distance", "origin_temp", "visib", "seats", "origin")) == [
        "distance", "origin", "time_hour", "tailnum"]


# daily features (a Delta 'date' column reads as datetime.date objects): EWR from Jan 1 and Jan 2, JFK from Jan 2
DAILY = FeatureLookup("main.flights.daily", ("origin",), ("delays",), timestamp_lookup_key="time_hour",
                      feature_timestamp_key="day")


def _daily() -> pd.DataFrame:
    return pd.DataFrame({"origin": ["EWR", "EWR", "JFK"], "day": [date(2013, 1, 1), date(2013, 1, 2), date(2013, 1, 2)],
                         "delays": [1.0, 2.0, 5.0]})


# the same wall clocks, as instants in UTC and as naive times; a date is midnight of its day in the rows' zone
DAILY_TIMES = ["2013-01-01 23:59:59", "2013-01-02 00:00:00", "2013-01-02 01:00:00", "2013-01-01 23:00:00"]
DAILY_ORIGINS = ["EWR", "EWR", "EWR", "JFK"]
DAILY_EXPECTED = [1.0, 2.0, 2.0, np.nan]  # before midnight: Jan 1; at and after: Jan 2; JFK has nothing on Jan 1


def test_a_date_feature_time_is_midnight_of_its_day_in_the_rows_zone_never_a_zone_refusal():
    naive = pd.DataFrame({"origin": DAILY_ORIGINS, "time_hour": pd.to_datetime(DAILY_TIMES)})
    utc = naive.assign(time_hour=naive["time_hour"].dt.tz_localize("UTC"))
    np.testing.assert_array_equal(join_features(naive, _daily(), DAILY)["delays"].to_numpy(), DAILY_EXPECTED)
    np.testing.assert_array_equal(join_features(utc, _daily(), DAILY)["delays"].to_numpy(), DAILY_EXPECTED)
    # an instant with an offset: 01:00 at +02:00 on Jan 2 is 23:00 UTC on Jan 1, before Jan 2's UTC midnight
    offset = pd.DataFrame({"origin": ["EWR"], "time_hour": ["2013-01-02T01:00:00+02:00"]})
    assert join_features(offset, _daily(), DAILY)["delays"].tolist() == [1.0]


def test_a_number_against_a_time_is_not_comparable_on_either_side_whatever_the_zone():
    numbers = _weather().assign(time_hour=np.arange(5.0))
    naive_rows = pd.DataFrame({"origin": ["EWR"], "time_hour": [T("2013-01-01 06:30")]})
    for rows in (naive_rows, naive_rows.assign(time_hour=naive_rows["time_hour"].dt.tz_localize("UTC"))):
        with pytest.raises(FeatureLookupError, match=r"main\.flights\.weather: timestamp_lookup_key 'time_hour' "
                                                     r"\(datetime64\[ns(, UTC)?\]\) and feature_timestamp_key "
                                                     r"'time_hour' \(float64\) are not comparable times"):
            join_features(rows, numbers, WEATHER)
    epoch_rows = pd.DataFrame({"origin": ["EWR"], "time_hour": pd.array([1_356_998_400], dtype="Int64")})
    with pytest.raises(FeatureLookupError, match=r"'time_hour' \(Int64\) and feature_timestamp_key 'time_hour' "
                                                 r"\(datetime64\[ns\]\) are not comparable times"):
        join_features(epoch_rows, _weather(), WEATHER)
    both = join_features(epoch_rows.assign(time_hour=[2.5]), numbers, WEATHER)  # numbers against numbers: compared
    assert both["origin_temp"].tolist() == [33.0]  # EWR at 0, 1, 2: the latest at or before 2.5 is 2 (33.0)


def test_text_that_mixes_times_with_and_without_an_offset_is_refused_naming_the_column():
    rows = pd.DataFrame({"origin": ["EWR", "EWR"], "time_hour": ["2013-01-01T06:30:00Z", "2013-01-01T06:30:00"]})
    with pytest.raises(FeatureLookupError, match=r"main\.flights\.weather: the rows' 'time_hour' mixes times that "
                                                 r"carry a time zone \(or UTC offset\) with times that do not.*give "
                                                 r"every time an offset"):
        join_features(rows, _weather(), WEATHER)


@pytest.mark.parametrize("text", ["2013-01-01", "2013-01-01T05", "2013-01-01 05:00:00", "20130101T050000",
                                  "2013-01-01T05:00:00Z", "2013-01-01T05:00:00z", " 2013-01-01T05:00:00Z ",
                                  "2013-01-01T05:00:00+02:00", "2013-01-01T05:00:00-0530", "2013-01-01T05:00:00+02",
                                  "2013-01-01T05+02", "2013-01-01T05:00:00.123456-03:00", "2013-01-01 05:00:00 +02:00",
                                  "2013-01-01 05:00:00 UTC", "20130101T050000+0200"])
def test_the_zone_of_iso_text_is_read_as_pandas_parses_it(text):
    parsed = pd.Timestamp(text)  # the independent answer: pandas' own parser, value by value
    assert time_kind(pd.Series([None, text])) == ("aware" if parsed.tzinfo is not None else "naive")


def test_the_kind_of_each_column_type():
    assert time_kind(pd.Series([date(2013, 1, 1), None])) == "date"
    assert time_kind(pd.Series([date(2013, 1, 1), datetime(2013, 1, 1, 5)])) == "naive"  # a datetime is no date
    assert time_kind(pd.Series([1, 2], dtype=object)) == "number"
    assert time_kind(pd.Series([None, None], dtype="string")) is None
    assert time_kind(pd.Series(["2013-01-01T05:00Z", "2013-01-01T05:00"], dtype="string")) == "mixed"
