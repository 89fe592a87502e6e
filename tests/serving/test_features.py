"""What a request to a lookup model carries (no server)."""

from __future__ import annotations

from lakescore.lookup import FeatureLookup
from lakescore.serving.features import request_columns

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

