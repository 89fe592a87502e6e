"""The kernels' array helpers: object_values and Positions."""

import numpy as np
import pandas as pd
import pytest

from lakescore.steps.arrays import ABSENT, MISSING, SMALL_ROWS, Positions, as_objects, object_values


@pytest.mark.parametrize("repeat", [1, SMALL_ROWS], ids=["dict probes", "one hash pass"])
def test_positions_find_values_as_a_python_dict_does(repeat):
    # keys: 1 then True (equal: True's position wins), "a"; 1.0 and True find position 1
    positions = Positions([1, True, "a", 2.5])
    values = as_objects([1.0, True, 1, "a", "1", 2.5, None, np.nan, pd.NA, 3] * repeat)
    want = [1, 1, 1, 2, ABSENT, 3, MISSING, MISSING, MISSING, ABSENT] * repeat
    assert positions.of(values).tolist() == want
    assert len(positions) == 4


@pytest.mark.parametrize("repeat", [1, SMALL_ROWS], ids=["dict probes", "one hash pass"])
def test_positions_of_integers_and_of_no_keys(repeat):
    assert Positions([7, 3]).of(np.array([3, 7, -1, 8] * repeat)).tolist() == [1, 0, ABSENT, ABSENT] * repeat
    assert Positions([]).of(as_objects(["x", None] * repeat)).tolist() == [ABSENT, MISSING] * repeat


def test_object_values_are_what_a_series_as_object_holds():
    naive = pd.Series(pd.to_datetime(["2013-01-01 05:00", None]))
    got = object_values(naive.to_numpy())
    assert got.dtype == object and got[0] == pd.Timestamp("2013-01-01 05:00") and got[1] is pd.NaT
    ints = object_values(pd.array([1, None], dtype="Int64"))
    assert ints.dtype == object and type(ints[0]) is int and ints[1] is pd.NA
    floats = object_values(np.array([1.5, np.nan]))
    assert type(floats[0]) is float and np.isnan(floats[1])
    stored = np.array(["a", None], dtype=object)
    assert object_values(stored) is stored
