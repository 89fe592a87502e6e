"""The pandas boundary of the hot path: column arrays read from a frame's blocks, and frames built from
arrays, give exactly what the public pandas calls give (dtypes, values, no inference, no copy)."""

import numpy as np
import pandas as pd
import pytest

from lakescore.frames import array_of, column_arrays, frame_of

STAMPS = pd.to_datetime(["2013-01-01 05:00", None, "2013-12-31 23:59"])
FRAME = pd.DataFrame({
    "int": np.array([1, -2, 2**53 + 1]),
    "float": [1.0, np.nan, 2.5],
    "float_too": [3.0, 4.0, np.nan],  # shares a block with "float"
    "Int64": pd.array([1, None, 3], dtype="Int64"),
    "boolean": pd.array([True, None, False], dtype="boolean"),
    "text": np.array(["a", None, np.nan], dtype=object),
    "string": pd.array(["a", None, "c"], dtype="string"),
    "naive_time": STAMPS,
    "utc_time": STAMPS.tz_localize("UTC"),
    "wait": pd.to_timedelta([1, None, 3], unit="s"),
    "category": pd.Categorical(["x", None, "y"]),
}, index=[10, 20, 30])
FRAME["stamps_as_objects"] = pd.Series(np.array(list(STAMPS), dtype=object), index=FRAME.index, dtype=object)


def _same_array(got, expected):
    assert type(got) is type(expected)
    assert got.dtype == expected.dtype
    assert len(got) == len(expected)
    assert pd.Series(got).equals(pd.Series(expected))


@pytest.mark.parametrize("rows", [slice(None), [1], [2, 0]], ids=["whole", "one_row", "two_rows"])
def test_column_arrays_are_what_each_column_s_series_holds(rows):
    frame = FRAME.iloc[rows]
    got = dict(column_arrays(frame, frame.columns))
    assert list(got) == list(frame.columns)
    for name, values in got.items():
        _same_array(values, array_of(frame[name]))
    assert isinstance(got["naive_time"], np.ndarray) and got["naive_time"].dtype == "datetime64[ns]"
    assert isinstance(got["wait"], np.ndarray) and got["wait"].dtype == "timedelta64[ns]"


def test_column_arrays_of_repeated_labels_read_each_label_as_the_frame_does():
    frame = pd.DataFrame([[1.0, 2.0, "a"]], columns=["x", "x", "y"])
    assert [name for name, _ in column_arrays(frame, ["y"])] == ["y"]
    _same_array(dict(column_arrays(frame, ["y"]))["y"], frame["y"].to_numpy())
    with pytest.raises(KeyError):
        dict(column_arrays(FRAME, ["absent"]))


def test_frame_of_keeps_each_array_and_its_dtype_as_series_of_that_dtype_do():
    arrays = {name: values for name, values in column_arrays(FRAME, FRAME.columns)}
    got = frame_of(arrays, FRAME.index)
    expected = pd.DataFrame({name: pd.Series(values, index=FRAME.index, dtype=values.dtype, copy=False)
                             for name, values in arrays.items()}, index=FRAME.index)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert got["stamps_as_objects"].dtype == object  # never inferred to datetime64
    assert got["text"].dtype == object
    assert got["Int64"].array is arrays["Int64"]  # an extension array is held, not copied


def test_frame_of_takes_a_shared_index_of_names():
    names = pd.Index(["a", "b"])
    one = frame_of({"a": pd.array([1], dtype="Int64"), "b": pd.array(["x"], dtype="string")}, pd.RangeIndex(1),
                   names=names)
    two = frame_of({"a": pd.array([2], dtype="Int64"), "b": pd.array([None], dtype="string")}, pd.RangeIndex(1, 2),
                   names=names)
    two["c"] = 1.0
    assert list(one.columns) == ["a", "b"] and list(names) == ["a", "b"]
    assert one["a"].tolist() == [1] and two["b"].isna().all()



def test_frames_of_the_same_names_share_labels_yet_each_keeps_its_own_columns_name():
    arrays = {"a": np.array([1.0]), "b": pd.array(["x"], dtype="string")}
    one, two = frame_of(arrays, pd.RangeIndex(1)), frame_of(arrays, pd.RangeIndex(1))
    one.columns.name = "renamed"  # set on one frame's labels: the other frames' stay as made
    assert two.columns.name is None and frame_of(arrays, pd.RangeIndex(1)).columns.name is None
    assert list(two.columns) == ["a", "b"]


def test_frame_of_names_that_are_equal_keys_keep_their_own_types():
    for names in ([1, 2], [1.0, 2.0], [True, False], ["1", "2"]):
        got = frame_of({name: np.array([0.5]) for name in names}, pd.RangeIndex(1))
        expected = pd.DataFrame({name: [0.5] for name in names})
        pd.testing.assert_index_equal(got.columns, expected.columns, exact=True)
        assert [type(c) for c in got.columns] == [type(c) for c in expected.columns]

def _set_in_turn(frame, new):
    out = frame.copy()
    for name, values in new.items():
        out[name] = values
    return out


def test_replace_columns_gives_what_setting_each_column_in_turn_gives():
    from lakescore.frames import replace_columns

    frame = FRAME.copy()
    new = {"int": np.array([0.5, 1.5, 2.5]), "text": np.array(["x", None, "z"], dtype=object),
           "Int64": np.array([7.0, np.nan, 9.0]), "added": np.array([True, False, True])}
    got = replace_columns(frame.copy(), list(new), lambda f, name: new[name])
    pd.testing.assert_frame_equal(got, _set_in_turn(frame, new), check_exact=True)
    assert list(got.columns) == [*FRAME.columns, "added"] and got.index.equals(FRAME.index)
    assert str(got["text"].dtype) == "object" and str(got["Int64"].dtype) == "float64"  # no inference


def test_replace_columns_of_a_column_named_twice_reads_the_first_result():
    from lakescore.frames import replace_columns

    frame = pd.DataFrame({"a": [1.0, 2.0]})
    got = replace_columns(frame, [("a", 10.0), ("a", 1.0)], lambda f, t: f[t[0]].to_numpy() + t[1])
    assert got["a"].tolist() == [12.0, 13.0]  # 1 + 10 + 1, 2 + 10 + 1: the second adds to the first


def test_set_columns_takes_a_series_by_its_index_as_setitem_does():
    from lakescore.frames import set_columns

    frame = pd.DataFrame({"a": [1.0, 2.0]}, index=[5, 6])
    got = set_columns(frame.copy(), {"a": pd.Series([20.0, 10.0], index=[6, 5])})
    assert got["a"].tolist() == [10.0, 20.0]
