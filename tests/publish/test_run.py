"""``build_request`` (through the publish workflow) on real Delta tables: the last check before a commit."""

from __future__ import annotations

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
