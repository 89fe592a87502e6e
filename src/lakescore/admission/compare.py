"""Output comparison for the probe: exact labels, strings, dtypes, index and order; floats within
``|a-b| <= 1e-12 + 1e-9*|b|`` with missing values in the same places."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from lakescore.frames import column_arrays, floats_close


@dataclass(frozen=True)
class Difference:
    """Why two outputs differ: the reason code and, where one column is to blame, its name."""

    reason: str
    column: str = ""


def difference(got: pd.DataFrame, want: pd.DataFrame, *, exact: bool = False,
               check_index: bool = True) -> Difference | None:
    """The first way ``got`` differs from ``want`` (reason and column), or None when they agree.

    Reasons as :func:`compare`; ``column`` names the first column whose dtype or values differ
    (empty for row counts, column lists and the index).
    """
    if len(got) != len(want):
        return Difference("row_count_mismatch")
    if list(got.columns) != list(want.columns):
        return Difference("column_mismatch")
    got_dtypes = got.dtypes if got.columns.is_unique else [got[name].dtype for name in want.columns]
    for name, got_dtype, want_dtype in zip(want.columns, got_dtypes, want.dtypes):
        if str(got_dtype) != str(want_dtype):
            return Difference("dtype_mismatch", str(name))
    if check_index and not got.index.equals(want.index):
        return Difference("index_mismatch")
    got_arrays = dict(column_arrays(got, got.columns)) if got.columns.is_unique else None
    want_arrays = dict(column_arrays(want, want.columns)) if want.columns.is_unique else None
    for name in want.columns:
        if got_arrays is not None and want_arrays is not None \
                and (a := _dense(got_arrays[name])) is not None and (b := _dense(want_arrays[name])) is not None:
            same = _same_arrays(a, b, exact=exact)
        else:
            same = _same_series(got[name], want[name], exact=exact)
        if not same:
            return Difference("output_mismatch", str(name))
    return None


def _dense(values: object) -> np.ndarray | None:
    """A column's values as one numpy array where that is cheap and loses nothing: a numpy column
    itself, a sparse float column (the text steps' ``Sparse[float64, 0]``) densified, with its
    missing values where the Series has them; None for any other extension array."""
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, pd.arrays.SparseArray) and values.dtype.subtype.kind == "f":
        return values.to_dense()
    return None


def _same_series(a: pd.Series, b: pd.Series, *, exact: bool) -> bool:
    """Missing values in the same places and the other values equal (floats within the tolerance)."""
    a_na, b_na = a.isna().to_numpy(), b.isna().to_numpy()
    if not np.array_equal(a_na, b_na):
        return False
    a, b = a[~a_na], b[~b_na]
    if pd.api.types.is_float_dtype(b.dtype) and not exact:
        return bool(floats_close(a.to_numpy(dtype="float64"), b.to_numpy(dtype="float64")).all())
    return bool((a.to_numpy() == b.to_numpy()).all())


def _same_arrays(a: np.ndarray, b: np.ndarray, *, exact: bool) -> bool:
    """:func:`_same_series` on two numpy columns of one dtype, without building a Series per column
    (a Series costs more than the comparison on a one-row chunk): ``pd.isna`` of the array is the
    Series' ``isna``, and the values outside it are the ones the Series path compares."""
    if a.dtype.kind in "iub":  # no missing value of their own
        return bool((a == b).all())
    a_na, b_na = pd.isna(a), pd.isna(b)
    if not np.array_equal(a_na, b_na):
        return False
    if a_na.any():
        a, b = a[~a_na], b[~b_na]
    if b.dtype.kind == "f" and not exact:
        return bool(floats_close(a, b).all())
    return bool((a == b).all())


def compare(got: pd.DataFrame, want: pd.DataFrame, *, exact: bool = False, check_index: bool = True) -> str | None:
    """Why ``got`` differs from ``want``, or None when they agree.

    Returns one of ``row_count_mismatch``, ``column_mismatch``, ``dtype_mismatch``,
    ``index_mismatch``, ``output_mismatch`` (values), or None. ``exact=True`` drops the float
    tolerance (the ``repeat`` check). :func:`difference` also names the column.
    """
    found = difference(got, want, exact=exact, check_index=check_index)
    return found.reason if found else None
