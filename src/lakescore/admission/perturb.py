"""How the probe changes one row of a sample: values moved (``perturbed``) or blanked (``blanked``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

UNSEEN_TEXT = "__lakescore_unseen__"


def _perturb_value(value: object, dtype: object, *, text: bool) -> object:
    if pd.isna(value):  # type: ignore[arg-type]
        return value
    if pd.api.types.is_bool_dtype(dtype):
        return not bool(value)
    if pd.api.types.is_integer_dtype(dtype):
        info = np.iinfo(np.dtype(str(dtype).lower()))
        moved = int(value) + max(1, abs(int(value)) // 2)  # type: ignore[call-overload]
        return moved if moved <= info.max else int(value) - max(1, abs(int(value)) // 2)  # type: ignore[call-overload]
    if pd.api.types.is_numeric_dtype(dtype):
        return float(value) + (0.5 * abs(float(value)) or 1.0)  # type: ignore[arg-type]
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return value + pd.Timedelta(hours=1)  # type: ignore[operator]
    return UNSEEN_TEXT if text else value


def perturbed(sample: pd.DataFrame, row: int, *, text: bool = True) -> pd.DataFrame:
    """A copy of ``sample`` with row ``row``'s inputs changed: numbers moved by half their size
    (within the integer type), booleans flipped, text replaced by an unseen value."""
    out = sample.copy()
    for col in out.columns:
        value = _perturb_value(out[col].iloc[row], out[col].dtype, text=text)
        out.iloc[row, out.columns.get_loc(col)] = value
    return out


def holds_null(dtype: object) -> bool:
    """True when the dtype has a missing value of its own (float, object, datetime, nullable
    extension types); plain numpy int and bool columns have none."""
    return isinstance(dtype, pd.api.extensions.ExtensionDtype) or np.dtype(dtype).kind in "fcOMm"  # type: ignore[call-overload]


def blanked(sample: pd.DataFrame, row: int) -> pd.DataFrame:
    """A copy of ``sample`` with row ``row``'s values missing: each column gets the missing value of
    its own dtype (NaN, None, NaT, pd.NA); plain int64 and bool columns, which have none, keep theirs."""
    out = sample.copy()
    for j, col in enumerate(out.columns):
        if holds_null(out[col].dtype):
            out.iloc[row, j] = None
    return out
