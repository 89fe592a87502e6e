"""Output comparison for the probe: exact labels, strings, dtypes, index and order; floats within
``|a-b| <= 1e-12 + 1e-9*|b|`` with missing values in the same places."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from lakescore.frames import floats_close


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
    for name in want.columns:
        if str(got[name].dtype) != str(want[name].dtype):
            return Difference("dtype_mismatch", str(name))
    if check_index and not got.index.equals(want.index):
        return Difference("index_mismatch")
    for name in want.columns:
        a, b = got[name], want[name]
        a_na, b_na = a.isna().to_numpy(), b.isna().to_numpy()
        if not np.array_equal(a_na, b_na):
            return Difference("output_mismatch", str(name))
        a, b = a[~a_na], b[~b_na]
        if pd.api.types.is_float_dtype(b.dtype) and not exact:
            same = floats_close(a.to_numpy(dtype="float64"), b.to_numpy(dtype="float64")).all()
        else:
            same = bool((a.to_numpy() == b.to_numpy()).all())  # type: ignore[assignment]  # a numpy bool above, a bool here
        if not same:
            return Difference("output_mismatch", str(name))
    return None


def compare(got: pd.DataFrame, want: pd.DataFrame, *, exact: bool = False, check_index: bool = True) -> str | None:
    """Why ``got`` differs from ``want``, or None when they agree.

    Returns one of ``row_count_mismatch``, ``column_mismatch``, ``dtype_mismatch``,
    ``index_mismatch``, ``output_mismatch`` (values), or None. ``exact=True`` drops the float
    tolerance (the ``repeat`` check). :func:`difference` also names the column.
    """
    found = difference(got, want, exact=exact, check_index=check_index)
    return found.reason if found else None
