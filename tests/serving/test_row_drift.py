"""The per-row drift check recorded with each answer."""

from __future__ import annotations

import pandas as pd

from lakescore.serving.drift import check_rows, reference_columns, reference_from, training_reference


def test_rows_outside_training_ranges_or_values_are_flagged() -> None:
    training = pd.DataFrame({"distance": [100, 500, 2500], "carrier": ["UA", "AA", "UA"], "hour": [5, 6, None]})
    reference = reference_from(training, ["distance", "carrier", "hour"])
    rows = [{"distance": 100, "carrier": "AA", "hour": 5}, {"distance": 2501, "carrier": "ZZ", "hour": 4},
            {"distance": None, "carrier": None, "hour": 6}, {"distance": float("nan"), "hour": True}]
    # nulls, NaN, a missing column and a bool in a numeric column are not drift
    assert check_rows(reference, rows) == ["ok", "out_of_range:distance;out_of_range:hour;unseen:carrier", "ok", "ok"]
    assert check_rows(None, rows) == ["no_reference"] * 4


def test_a_lookup_time_is_never_drift_but_an_unseen_key_is() -> None:
    training = pd.DataFrame({"time_hour": pd.to_datetime(["2013-01-01 05:00", "2013-02-01 06:00"], utc=True),
                             "tailnum": ["N1", "N2"]})
    reference = reference_from(training, ["time_hour", "tailnum"])
    rows = [{"time_hour": "2013-10-01T05:00:00+00:00", "tailnum": "N1"},
            {"time_hour": "2013-01-01T05:00:00+00:00", "tailnum": "N9"}]
    assert check_rows(reference, rows) == ["ok", "unseen:tailnum"]


def test_the_reference_reads_the_training_rows_after_the_filter(runtime) -> None:
    runtime.write_table("main.t.train", pd.DataFrame({"month": [1, 9, 12], "distance": [10, 20, 30],
                                                      "arr_delay": [1.0, 2.0, None]}))
    row_filter = "month <= 9 and arr_delay.notna()"
    columns = reference_columns(["month", "distance"], row_filter)
    assert columns == ["month", "distance", "arr_delay"]
    reference = training_reference(runtime.read_table("main.t.train", columns=columns), row_filter=row_filter,
                                   columns=["month", "distance"])
    assert reference.numeric == {"month": (1.0, 9.0), "distance": (10.0, 20.0)}
