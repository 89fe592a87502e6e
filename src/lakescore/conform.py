"""Input conformance: each raw column against the type the model signature declares, row by row.

Every route hands the pyfunc a frame whose columns may not have the types the model was trained
on: a single-node read of an integer column with a null arrives as float64, a Spark batch as
nullable Int64 (Spark 4.2+) or exact ``Decimal`` values (Spark 4.1, see
:mod:`lakescore.scoring.spark`), an HTTP request as Python objects. :func:`conform_inputs` turns each declared column
into one dtype per signature type, so every route gives the chain the same frame:

====================  ==========================================================================
signature type        column handed to the chain
====================  ==========================================================================
``long``/``integer``  ``Int64`` (nullable; never through float64, so 2**53 + 1 stays exact)
``double``/``float``  ``float64`` (null is NaN)
``string``            ``object`` of str and None
``boolean``           ``boolean`` (nullable)
``datetime``          ``datetime64[ns]`` (null is NaT)
====================  ==========================================================================

A null is a value like any other: it goes to the chain, whose recipe imputes it (or whose model
takes it). A value of another kind — text in a number column, 1.5 in an integer column, a number in
a text column, a date that does not parse, a boolean where a number is declared — cannot be given to
the model: its row is marked ``invalid:<column>`` (the first such column) and the pyfunc excludes it
(``scoring_status = excluded``) instead of failing the batch. No value is ever printed.
"""

from __future__ import annotations

import numbers
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

from lakescore.columns import text_or_missing
from lakescore.frames import column_arrays

INT64_MAX = 2**63 - 1


def conform_inputs(frame: pd.DataFrame, kinds: dict[str, str]) -> tuple[pd.DataFrame, np.ndarray]:
    """Convert each column named in ``kinds`` to its signature type and find the rows that cannot be.

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, n_columns)
        Raw request or batch rows; columns not in ``kinds`` are passed through untouched, and a
        column of ``kinds`` that the frame lacks is left for the chain to report.
    kinds : dict of str to str
        Column -> MLflow signature type name (``long``, ``integer``, ``double``, ``float``,
        ``string``, ``boolean``, ``datetime``); other names are not checked.

    Returns
    -------
    frame : DataFrame of shape (n_rows, n_columns), same index, declared columns converted; the
        given frame itself when each declared column already holds its type as the chain takes it
        (:func:`conformed`: what a checked HTTP request and most batches are), else a new frame.
    reasons : ndarray of object, shape (n_rows,)
        ``"invalid:<column>"`` for a row holding a value of the wrong kind (first such column in
        ``kinds`` order), None for a row the model can take.
    """
    reasons = np.full(len(frame), None, dtype=object)
    declared = [(name, kind) for name, kind in kinds.items() if kind in _CONVERTERS and name in frame.columns]
    if frame.columns.is_unique:  # each column's array read once, without a Series (a one-row request pays for each)
        arrays = dict(column_arrays(frame, [name for name, _ in declared]))
        declared = [(name, kind) for name, kind in declared if not conformed(arrays[name], kind)]
    if not declared:
        return frame, reasons
    out = frame.copy(deep=False)
    for name, kind in declared:
        given = out[name]
        column, bad = _CONVERTERS[kind](given)
        if column is not given:
            out[name] = column
        if bad.any():
            reasons[bad & pd.isna(reasons)] = f"invalid:{name}"
    return out, reasons


def conformed(values: Any, kind: str) -> bool:
    """True when a column's array (numpy or pandas extension, shape (n_rows,)) already holds signature
    type ``kind`` as the chain takes it, so its converter would hand it on as it is and flag no row:
    Int64 for ``long``/``integer``, float64 for ``double``/``float``, an object array of text with
    nothing missing for ``string``, a nullable boolean array for ``boolean``, any datetime64 for
    ``datetime``. False for anything the converter must look at row by row."""
    dtype = values.dtype
    if kind in ("long", "integer"):
        return isinstance(dtype, pd.Int64Dtype)
    if kind in ("double", "float"):
        return dtype == np.float64
    if kind == "string":
        return isinstance(dtype, np.dtype) and dtype.kind == "O" and pd.api.types.infer_dtype(values, skipna=False) == "string"
    if kind == "boolean":
        return isinstance(dtype, pd.BooleanDtype)
    return kind == "datetime" and pd.api.types.is_datetime64_any_dtype(dtype)


def _to_integers(column: pd.Series) -> tuple[pd.Series, np.ndarray]:
    dtype = column.dtype
    if dtype == "Int64":  # already the chain's type (a validated HTTP request, a Spark 4.2 batch)
        return column, np.zeros(len(column), dtype=bool)
    if pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_unsigned_integer_dtype(dtype):
        return column.astype("Int64"), np.zeros(len(column), dtype=bool)
    if isinstance(dtype, np.dtype) and dtype.kind == "f":  # a single-node read of an integer column with a null
        floats = column.to_numpy()
        missing = np.isnan(floats)
        with np.errstate(invalid="ignore"):
            good = ~missing & np.isfinite(floats) & (floats == np.floor(floats)) & (np.abs(floats) < 2.0**63)
        array = pd.arrays.IntegerArray(np.where(good, floats, 0).astype("int64"), ~good)
        return pd.Series(array, index=column.index, name=column.name), ~good & ~missing
    values = column.tolist()
    missing = np.array([_is_missing(v) for v in values], dtype=bool)
    good = np.array([not m and _is_integer(v) for v, m in zip(values, missing)], dtype=bool)
    data = np.array([int(v) if g else 0 for v, g in zip(values, good)], dtype="int64")
    array = pd.arrays.IntegerArray(data, ~good)
    return pd.Series(array, index=column.index, name=column.name), ~good & ~missing


def _to_floats(column: pd.Series) -> tuple[pd.Series, np.ndarray]:
    dtype = column.dtype
    if dtype == np.float64:  # already the chain's type (NaN is null)
        return column, np.zeros(len(column), dtype=bool)
    if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        return column.astype("Float64").astype("float64"), np.zeros(len(column), dtype=bool)
    values = column.tolist()
    missing = np.array([_is_missing(v) for v in values], dtype=bool)
    good = np.array([not m and _is_number(v) for v, m in zip(values, missing)], dtype=bool)
    data = np.array([float(v) if g else np.nan for v, g in zip(values, good)], dtype="float64")
    return pd.Series(data, index=column.index, name=column.name), ~good & ~missing


def _to_strings(column: pd.Series) -> tuple[pd.Series, np.ndarray]:
    if column.dtype == object or isinstance(column.dtype, pd.StringDtype):
        values = column.to_numpy(dtype=object)
        if pd.api.types.infer_dtype(values, skipna=False) == "string":  # text only, nothing missing: as it is
            # one C pass (5 ms per million values) instead of the pass that finds the missing
            # values to set to None (28 ms), which a column without one does not need
            texts = column if column.dtype == object else pd.Series(values, index=column.index, name=column.name)
            return texts, np.zeros(len(column), dtype=bool)
        texts = text_or_missing(values)
        if texts is not None:
            missing = pd.isna(texts)
            if missing.any():
                texts = texts.copy()
                texts[missing] = None
            return pd.Series(texts, index=column.index, name=column.name), np.zeros(len(column), dtype=bool)
    values = column.tolist()
    missing = np.array([_is_missing(v) for v in values], dtype=bool)
    good = np.array([not m and isinstance(v, str) for v, m in zip(values, missing)], dtype=bool)
    data = np.array([v if g else None for v, g in zip(values, good)], dtype=object)
    return pd.Series(data, index=column.index, name=column.name), ~good & ~missing


def _to_booleans(column: pd.Series) -> tuple[pd.Series, np.ndarray]:
    values = column.tolist()
    missing = np.array([_is_missing(v) for v in values], dtype=bool)
    good = np.array([not m and isinstance(v, (bool, np.bool_)) for v, m in zip(values, missing)], dtype=bool)
    data = np.array([bool(v) if g else False for v, g in zip(values, good)], dtype=bool)
    array = pd.arrays.BooleanArray(data, ~good)
    return pd.Series(array, index=column.index, name=column.name), ~good & ~missing


def _to_datetimes(column: pd.Series) -> tuple[pd.Series, np.ndarray]:
    if pd.api.types.is_datetime64_any_dtype(column.dtype):
        return column, np.zeros(len(column), dtype=bool)
    missing = column.isna().to_numpy(dtype=bool)
    is_text_or_time = np.array([isinstance(v, (str, pd.Timestamp, np.datetime64)) or hasattr(v, "isoformat")
                                for v in column.tolist()], dtype=bool)
    parsed = pd.to_datetime(column.where(is_text_or_time), errors="coerce", format="mixed")
    bad = ~missing & parsed.isna().to_numpy(dtype=bool)
    return parsed, bad


def _is_missing(value: Any) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, (float, np.floating))
                                                                 and np.isnan(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _is_integer(value: Any) -> bool:
    """An int, a whole Decimal, or a finite float with no fraction, within int64 (JSON has no
    integer type; Spark 4.1 hands bigint inputs over as decimal(19,0))."""
    if isinstance(value, (numbers.Integral)) and not isinstance(value, (bool, np.bool_)):
        return -INT64_MAX - 1 <= int(value) <= INT64_MAX
    if isinstance(value, Decimal):
        return value.is_finite() and value == value.to_integral_value() and -INT64_MAX - 1 <= int(value) <= INT64_MAX
    if _is_number(value):
        number = float(value)
        return bool(np.isfinite(number)) and number == np.floor(number) and abs(number) < 2.0**63
    return False


_CONVERTERS = {"long": _to_integers, "integer": _to_integers, "double": _to_floats, "float": _to_floats,
               "string": _to_strings, "boolean": _to_booleans, "datetime": _to_datetimes}
