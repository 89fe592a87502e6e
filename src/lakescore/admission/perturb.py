"""How the probe changes one row of a sample: values moved (``perturbed``) or blanked (``blanked``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

UNSEEN_TEXT = "__lakescore_unseen__"


def _perturb_value(value: object, dtype: object, *, text: bool) -> object:
    if pd.isna(value):
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
        return value + pd.Timedelta(hours=1)
    return UNSEEN_TEXT if text else value


def perturbed(sample: pd.DataFrame, row: int, *, text: bool = True) -> pd.DataFrame:
    """A copy of ``sample`` with row ``row``'s inputs changed: numbers moved by half their size
    (within the integer type), booleans flipped, text replaced by an unseen value."""
    out = sample.copy()
    values = [_perturb_value(out[col].iloc[row], out[col].dtype, text=text) for col in out.columns]
    if values:  # one positional set of the row's cells, column by column as pandas does for each
        out.iloc[row, list(range(len(values)))] = values
    return out


def holds_null(dtype: object) -> bool:
    """True when the dtype has a missing value of its own (float, object, datetime, nullable
    extension types); plain numpy int and bool columns have none."""
    return isinstance(dtype, pd.api.extensions.ExtensionDtype) or np.dtype(dtype).kind in "fcOMm"  # type: ignore[call-overload]


def blanked(sample: pd.DataFrame, row: int) -> pd.DataFrame:
    """A copy of ``sample`` with row ``row``'s values missing: each column gets the missing value of
    its own dtype (NaN, None, NaT, pd.NA); plain int64 and bool columns, which have none, keep theirs."""
    out = sample.copy()
    blanks = [j for j, col in enumerate(out.columns) if holds_null(out[col].dtype)]
    if blanks:  # one positional set of those cells (each column takes None as its own missing value)
        out.iloc[row, blanks] = None
    return out


def missing_column(values: pd.Series) -> pd.Series:
    """``values`` missing in every row, in its dtype's own missing value: None in an object column,
    else NaN, NaT or pd.NA (the dtype is kept)."""
    if values.dtype == object:
        return pd.Series([None] * len(values), index=values.index, dtype=object)
    return values.mask(np.ones(len(values), dtype=bool))


def all_missing(sample: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``sample`` with every column that can hold a missing value missing in every row
    (plain int64 and bool columns, which cannot, keep their values)."""
    out = sample.copy()
    for col in out.columns:
        if holds_null(out[col].dtype):
            out[col] = missing_column(out[col])
    return out


def unseen_text(sample: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``sample`` with every text value replaced by a value no training frame holds
    (:data:`UNSEEN_TEXT`); numbers, dates and missing values kept, and each column's dtype (a
    categorical column becomes object, as its categories cannot hold the new value)."""
    out = sample.copy()
    for col in out.columns:
        values = out[col]
        texts = values.astype(object).to_numpy(copy=True)
        is_text = np.array([isinstance(v, str) for v in texts], dtype=bool)
        if is_text.any():
            texts[is_text] = UNSEEN_TEXT
            dtype = object if isinstance(values.dtype, pd.CategoricalDtype) else values.dtype
            out[col] = pd.Series(texts, index=values.index, dtype=object).astype(dtype)
    return out
