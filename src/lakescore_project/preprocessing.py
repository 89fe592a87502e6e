"""Custom preprocessing steps of the flights project.

Each step is declared at module level and named in config/training.yml by ``module:attribute``::

    - {step: custom, name: dep_clock, ref: "lakescore_project.preprocessing:dep_clock_step", columns: [hour, minute]}

A function receives a copy of the step's ``columns`` and must read only each row's own values
(and, for a fitted step, its saved state). The demo recipe uses built-in steps only; these are
examples (and the test suite's user steps).
"""

import pandas as pd

from lakescore.custom import column_step, filter_step, fitted_step


def dep_clock(frame: pd.DataFrame) -> pd.Series:
    """Scheduled departure as hours after midnight (float): hour + minute / 60."""
    return frame["hour"].astype("float64") + frame["minute"].astype("float64") / 60.0


def learn_carrier_delay(frame: pd.DataFrame, y: pd.Series | None) -> dict:
    """Median departure delay (minutes) per carrier on the training rows, and overall."""
    delays = frame.dropna(subset=["dep_delay"])
    by_carrier = delays.groupby("carrier")["dep_delay"].median()
    return {"by_carrier": {str(k): float(v) for k, v in by_carrier.items()},
            "overall": float(delays["dep_delay"].median())}


def apply_carrier_delay(frame: pd.DataFrame, state: dict) -> pd.Series:
    """Each row's carrier median delay from state; an unseen carrier gets the overall median."""
    known = frame["carrier"].astype(str).map(state["by_carrier"])
    return known.fillna(state["overall"]).astype("float64")


def has_distance(frame: pd.DataFrame) -> pd.Series:
    """Keep flights with a positive distance (True keeps the row)."""
    return frame["distance"] > 0


dep_clock_step = column_step("dep_clock", dep_clock, output=["dep_clock"])
carrier_delay_step = fitted_step("carrier_delay", learn_carrier_delay, apply_carrier_delay,
                                 output=["carrier_median_delay"])
positive_distance = filter_step("positive_distance", has_distance)
