"""What a request to a lookup model carries, and the join a replica makes with the feature rows it holds (no server)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd

from lakescore.lookup import FeatureLookup, join_features
from lakescore.serving.features import TIMESTAMP_KIND, Features, request_columns
from lakescore.serving.http.wire import parse_request

WEATHER = FeatureLookup("main.flights.weather", ("origin",), ("temp", "wind_speed"), timestamp_lookup_key="time_hour")
PLANES = FeatureLookup("main.flights.planes", ("tailnum",), ("year",), (("year", "plane_year"),))
SIGNATURE = {"dep_delay": "double", "temp": "double", "origin": "string", "wind_speed": "double",
             "plane_year": "double"}


def test_the_request_carries_the_rows_own_columns_and_every_key_and_time() -> None:
    columns = request_columns(SIGNATURE, [WEATHER.to_json(), PLANES.to_json()])
    # origin is a chain input too: it keeps its signature type; tailnum and time_hour are only keys
    assert list(columns.items()) == [("dep_delay", "double"), ("origin", "string"), ("time_hour", "timestamp"),
                                     ("tailnum", "key")]


def test_a_model_without_lookups_reads_its_signature() -> None:
    assert request_columns(SIGNATURE, []) == SIGNATURE



def _weather(times: list[str], *, utc: bool) -> pd.DataFrame:
    # EWR's temperatures at 05:00, 06:00 and 08:00; a Delta timestamp_ntz column reads as naive datetime64
    return pd.DataFrame({"origin": ["EWR", "EWR", "EWR"], "time_hour": pd.to_datetime(times, utc=utc),
                         "temp": [30.0, 31.0, 33.0], "wind_speed": [1.0, 2.0, 3.0]})


HOURS = ["2013-01-01 05:00", "2013-01-01 06:00", "2013-01-01 08:00"]


def test_a_request_time_is_compared_as_utc_wall_clock_against_a_feature_table_without_a_zone() -> None:
    columns = {"dep_delay": "double", "origin": "string", "time_hour": TIMESTAMP_KIND}
    # 07:30 at +02:00 is 05:30 UTC; 07:59Z; 08:00 without an offset is UTC; 04:59Z is before every row
    body = json.dumps({"dataframe_split": {"columns": list(columns), "data": [
        [1.0, "EWR", "2013-01-01T07:30:00+02:00"], [2.0, "EWR", "2013-01-01T07:59:00Z"],
        [3.0, "EWR", "2013-01-01T08:00:00"], [4.0, "EWR", "2013-01-01T04:59:00Z"]]}}).encode()
    request = parse_request(body, columns, max_body_bytes=10_000, max_rows=10).frame
    assert str(request["time_hour"].dtype) == "datetime64[ns, UTC]"  # what the wire gives a replica
    naive = Features({WEATHER.table_name: _weather(HOURS, utc=False)}, {WEATHER.table_name: 3})
    served = naive.join(request, [WEATHER])
    # the batch join of naive rows (the same instants as UTC wall clocks) against the same naive table
    batch_rows = request.assign(time_hour=pd.to_datetime(["2013-01-01 05:30", "2013-01-01 07:59", "2013-01-01 08:00",
                                                          "2013-01-01 04:59"]))
    batch = join_features(batch_rows, _weather(HOURS, utc=False), WEATHER)
    pd.testing.assert_frame_equal(served[["temp", "wind_speed"]], batch[["temp", "wind_speed"]])
    assert served["temp"].tolist()[:3] == [30.0, 31.0, 33.0] and np.isnan(served["temp"].iloc[3])
    pd.testing.assert_series_equal(served["time_hour"], request["time_hour"])  # the rows keep their instants
    aware = Features({WEATHER.table_name: _weather(HOURS, utc=True)}, {WEATHER.table_name: 3})
    pd.testing.assert_frame_equal(aware.join(request, [WEATHER]), served)  # a UTC table: the same features


def test_the_replicas_join_equals_join_all_lookup_after_lookup_on_many_requests() -> None:
    from lakescore.lookup import join_all

    rng = np.random.default_rng(3)
    hours = pd.date_range("2013-01-01", periods=300, freq="h", tz="UTC")
    weather = pd.DataFrame({"origin": np.repeat(["EWR", "JFK"], 300), "time_hour": np.tile(hours, 2),
                            "temp": rng.normal(40, 9, 600), "wind_speed": rng.normal(9, 3, 600)})
    planes = pd.DataFrame({"tailnum": [f"N{i}" for i in range(200)],
                           "year": pd.array(rng.integers(1970, 2013, 200), dtype="Int64")})
    tables = {WEATHER.table_name: weather.astype({"time_hour": "datetime64[us, UTC]"}), PLANES.table_name: planes}
    features = Features.of(SimpleNamespace(frames=tables, versions=dict.fromkeys(tables, 0)), [WEATHER, PLANES])
    assert set(features.indexes) == {WEATHER, PLANES}  # built once, before any request
    n = 400
    requests = pd.DataFrame({
        "dep_delay": rng.normal(0, 9, n), "origin": np.array(["EWR", "JFK", "LGA", None], dtype=object)[rng.integers(0, 4, n)],
        "time_hour": hours[0] + pd.to_timedelta(rng.integers(-90, 320 * 60, n), unit="min"),
        "tailnum": np.array([f"N{i}" for i in range(0, 260, 3)] + [None], dtype=object)[rng.integers(0, 88, n)]})
    want = join_all(requests, tables, [WEATHER, PLANES])
    pd.testing.assert_frame_equal(features.join(requests, [WEATHER, PLANES]), want, check_exact=True)
    for i in range(0, n, 37):  # one-row requests, as a replica gets them
        pd.testing.assert_frame_equal(features.join(requests.iloc[[i]], [WEATHER, PLANES]), want.iloc[[i]],
                                      check_exact=True)


def test_a_lookup_keyed_on_an_earlier_lookups_output_is_joined_after_it() -> None:
    from lakescore.lookup import join_all

    makers = pd.DataFrame({"maker": ["BOEING", "AIRBUS"], "country": ["US", "FR"]})
    planes = pd.DataFrame({"tailnum": ["N1", "N2", "N3"], "maker": ["BOEING", "AIRBUS", "EMBRAER"]})
    by_maker = FeatureLookup("main.flights.makers", ("maker",), ("country",))
    by_tail = FeatureLookup("main.flights.planes", ("tailnum",), ("maker",))
    tables = {by_tail.table_name: planes, by_maker.table_name: makers}
    features = Features(tables, {name: 0 for name in tables})
    rows = pd.DataFrame({"tailnum": ["N3", "N1", None, "N2", "N9"]})
    got = features.join(rows, [by_tail, by_maker])
    pd.testing.assert_frame_equal(got, join_all(rows, tables, [by_tail, by_maker]), check_exact=True)
    assert got["country"].isna().tolist() == [True, False, True, False, True]  # EMBRAER has no row, nor N9
    assert got["country"].iloc[[1, 3]].tolist() == ["US", "FR"]
