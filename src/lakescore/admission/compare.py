"""Output comparison for the probe: exact labels, strings, dtypes, index and order; floats within
``|a-b| <= 1e-12 + 1e-9*|b|`` with missing values in the same places."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lakescore.frames import floats_close


def compare(got: pd.DataFrame, want: pd.DataFrame, *, exact: bool = False, check_index: bool = True) -> str | None:
    """Why ``got`` differs from ``want``, or None when they agree.

    Returns one of ``row_count_mismatch``, ``column_mismatch``, ``dtype_mismatch``,
    ``index_mismatch``, ``output_mismatch`` (values), or None. ``exact=True`` drops the float
    tolerance (the ``repeat`` check).
    """
    if len(got) != len(want):
        return "row_count_mismatch"
    if list(got.columns) != list(want.columns):
        return "column_mismatch"
    if [str(t) for t in got.dtypes] != [str(t) for t in want.dtypes]:
        return "dtype_mismatch"
    if check_index and not got.index.equals(want.index):
        return "index_mismatch"
    for name in want.columns:
        a, b = got[name], want[name]
        a_na, b_na = a.isna().to_numpy(), b.isna().to_numpy()
        if not np.array_equal(a_na, b_na):
            return "output_mismatch"
        a, b = a[~a_na], b[~b_na]
        if pd.api.types.is_float_dtype(b.dtype) and not exact:
            same = floats_close(a.to_numpy(dtype="float64"), b.to_numpy(dtype="float64")).all()
        else:
            same = bool((a.to_numpy() == b.to_numpy()).all())
        if not same:
            return "output_mismatch"
    return None
