"""Frame rules shared by every part: exact JSON state, float tolerance, the pandas/Polars boundary.

State that a step learns must round-trip through JSON exactly: integer dict keys stay integers,
NaN and infinities survive, numpy arrays keep their dtype. :func:`encode_state` and
:func:`decode_state` are that codec.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from lakescore.errors import InputError

RTOL = 1e-9
ATOL = 1e-12


def floats_close(a: Any, b: Any) -> np.ndarray:
    """Element-wise float agreement: ``|a-b| <= 1e-12 + 1e-9*|b|``, NaN matching NaN.

    The tolerance is the one every admission check and equivalence test uses (issue 2/4).
    """
    a = np.asarray(a, dtype="float64")
    b = np.asarray(b, dtype="float64")
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore"):
        close = np.abs(a - b) <= ATOL + RTOL * np.abs(b)
    return both_nan | close | (a == b)


def _encode(value: Any) -> Any:
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _encode(v) for k, v in value.items()}
        return {"__items__": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": [_encode(v) for v in value.tolist()], "dtype": str(value.dtype)}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            return {"__float__": repr(value)}
        return value
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise TypeError(
        f"step state holds a {type(value).__name__} ({value!r:.60}); state must be numbers, "
        "strings, lists, dicts or numeric arrays. Convert it in learn()."
    )


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "__items__" in value:
            return {_decode(k): _decode(v) for k, v in value["__items__"]}
        if "__ndarray__" in value:
            return np.array(_decode(value["__ndarray__"]), dtype=value["dtype"])
        if "__float__" in value:
            return float(value["__float__"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def encode_state(state: Any) -> str:
    """Serialise step state to JSON text that :func:`decode_state` restores exactly.

    Raises
    ------
    TypeError
        When the state holds something other than numbers, strings, lists, dicts or arrays.
    """
    return json.dumps(_encode(state), sort_keys=True, allow_nan=False)


def decode_state(text: str) -> Any:
    """Inverse of :func:`encode_state`."""
    return _decode(json.loads(text))


def to_pandas(frame: Any) -> pd.DataFrame:
    """Convert a pandas or Polars frame to pandas once, at the boundary.

    Polars integer columns become pandas nullable ``Int64`` (never float64), strings become
    ``object`` with None for missing, so a Polars-trained recipe sees stable dtypes.

    Raises
    ------
    InputError
        When ``frame`` is neither a pandas nor a Polars DataFrame.
    """
    if isinstance(frame, pd.DataFrame):
        return frame
    module = type(frame).__module__
    if module.startswith("polars"):
        return frame.to_pandas(use_pyarrow_extension_array=False, types_mapper=nullable_pandas_type)
    raise InputError(
        f"expected a pandas or Polars DataFrame; got {type(frame).__name__}. "
        "Pass pandas.DataFrame(...) or polars.DataFrame(...)."
    )


def array_of(series: pd.Series) -> Any:
    """A column's values: the numpy array for numpy dtypes, the extension array otherwise."""
    return series.to_numpy() if isinstance(series.dtype, np.dtype) else series.array


def column_arrays(frame: pd.DataFrame, names: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """``(name, array_of(frame[name]))`` for each of ``names``, read from the frame's blocks without
    building a Series per column when the frame's column labels are unique (pandas'
    ``_get_column_array``: the array ``frame[name]`` wraps; a Series costs more than the rest of a
    one-row score). A numpy-dtype column comes as its numpy array (naive datetimes and timedeltas
    too, as ``Series.to_numpy`` gives them), any other as its extension array.

    Raises
    ------
    KeyError
        For a name the frame lacks, as ``frame[name]`` does.
    """
    getter = getattr(frame, "_get_column_array", None)
    labels = frame.columns
    if getter is None or not labels.is_unique:
        for name in names:
            yield name, array_of(frame[name])
        return
    for name in names:
        values = getter(labels.get_loc(name))
        if isinstance(values.dtype, np.dtype) and not isinstance(values, np.ndarray):
            values = np.asarray(values)  # a naive DatetimeArray / TimedeltaArray: its numpy array
        yield name, values


def frame_of(columns: dict[str, Any], index: pd.Index, *, names: pd.Index | None = None) -> pd.DataFrame:
    """A pandas frame of ``columns`` that holds each array as it is, in its own dtype: what
    ``pd.DataFrame({n: pd.Series(a, index=index, dtype=a.dtype, copy=False) ...})`` gives (an object
    array stays object, never inferred), built without the constructor's per-column checks
    (pandas' ``DataFrame._from_arrays``; they cost more than the rest of a one-row score).

    Parameters
    ----------
    columns : dict of str to array of shape (n_rows,)
        1-D numpy or pandas extension arrays, each of length ``len(index)``.
    index : pandas Index of length n_rows
    names : pandas Index, optional
        ``list(columns)`` as an Index, when the caller keeps one (an Index is immutable, so frames
        may share it). Without it, the labels of text-named columns come from :func:`labels_of`.
    """
    build = getattr(pd.DataFrame, "_from_arrays", None)
    if build is None:  # a pandas without it: the public constructor, which checks each column
        return pd.DataFrame({name: pd.Series(values, index=index, dtype=values.dtype, copy=False)
                             for name, values in columns.items()}, index=index, copy=False)
    if names is None:
        keys = tuple(columns)
        names = labels_of(keys) if all(type(key) is str for key in keys) else pd.Index(list(keys))
    return build(list(columns.values()), columns=names.view(), index=index, verify_integrity=False)


@lru_cache(maxsize=64)
def labels_of(names: tuple[str, ...]) -> pd.Index:
    """The column labels ``names`` as one Index (what the frame constructor makes of the list), made
    once per set of names: building an Index from a list costs more than the rest of a one-row
    frame (0.047 ms of a frame's 0.067 ms). :func:`frame_of` gives each frame its own view of it
    (``Index.view``: a frame's ``columns.name`` set later changes that frame's labels only).
    Text names only: ``1``, ``1.0`` and ``True`` are equal keys of the cache."""
    return pd.Index(list(names))


def set_columns(frame: pd.DataFrame, new: dict[str, Any]) -> pd.DataFrame:
    """``frame`` after ``frame[name] = values`` for each of ``new`` in turn (a column it has keeps
    its place, a new one comes last), as one new frame built at once (:func:`frame_of`) when each
    value is a 1-D numpy array of ``len(frame)`` and the labels are unique: each ``__setitem__``
    rebuilds the frame's blocks, which costs more than a one-row step. Otherwise, and always for
    other values (a Series aligns on its index), ``frame`` itself is set column by column and
    returned. The arrays of ``frame`` that ``new`` does not replace are shared, not copied."""
    labels = frame.columns
    if labels.is_unique and all(isinstance(v, np.ndarray) and v.shape == (len(frame),) for v in new.values()):
        arrays = dict(column_arrays(frame, labels))
        arrays.update(new)
        return frame_of(arrays, frame.index, names=labels if len(arrays) == len(labels) else None)
    for name, values in new.items():
        frame[name] = values
    return frame


def replace_columns(frame: pd.DataFrame, columns: Iterable[Any],
                    value_of: Callable[[pd.DataFrame, Any], Any]) -> pd.DataFrame:
    """``frame`` after ``frame[column] = value_of(frame, column)`` for each of ``columns`` in turn
    (``column`` is the item; ``value_of`` reads ``column[0]`` when items are tuples of a column
    name and its terms). When the names are distinct no value reads another's result, so each is
    computed from ``frame`` and the frame is built once (:func:`set_columns`)."""
    items = list(columns)
    names = [item[0] if isinstance(item, tuple) else item for item in items]
    if len(set(names)) < len(names):  # a column named twice: each in turn, the second reads the first
        for name, item in zip(names, items):
            frame[name] = value_of(frame, item)
        return frame
    return set_columns(frame, {name: value_of(frame, item) for name, item in zip(names, items)})


def nullable_pandas_type(arrow_type: Any) -> Any:
    """Arrow -> pandas ``types_mapper`` of every read into pandas: integers become ``Int64`` and
    booleans ``boolean`` (nullable, so a null never turns an integer column into float64, where
    values above 2**53 are rounded, or a boolean column into object); other types keep pyarrow's
    default (None)."""
    import pyarrow as pa  # only where Arrow data becomes pandas

    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_boolean(arrow_type):
        return pd.BooleanDtype()
    return None


def require_columns(frame: pd.DataFrame, columns: list[str] | tuple[str, ...], *, what: str) -> None:
    """Raise :class:`InputError` naming every column of ``columns`` missing from ``frame``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(
            f"{what} needs column(s) {missing} that the frame does not have "
            f"(it has {list(frame.columns)[:20]}). Add them or fix the recipe.",
            columns=missing,
        )


# --- the Spark transport: values plus a null mask ---------------------------------------------
# mlflow.pyfunc.spark_udf casts each field of a struct result with ``astype(<numpy type>)``
# (mlflow 3.17, pyfunc/__init__.py _convert_struct_values): a missing string becomes the text
# "None" or "<NA>", a missing integer fails the cast, and a double carries integers above 2**53
# inexactly. So the Spark route sends every output column with no missing values, in its own type
# (integers as int64, never through float64), plus one boolean field per column that marks the
# rows where it is null. No value of any type is reserved to mean null.
NULL_MASK_PREFIX = "_lakescore_null_"
TRANSPORT_TYPES = {"Int64": "bigint", "Float64": "double", "boolean": "boolean", "string": "string"}
"""pandas dtype of a scored column -> Spark type of its transport field (and of the final column)."""


def null_mask_name(column: str) -> str:
    """The transport field that marks the rows where ``column`` is null."""
    return f"{NULL_MASK_PREFIX}{column}"


def to_transport(frame: pd.DataFrame) -> pd.DataFrame:
    """Encode a scored frame for a Spark struct result: values with nothing missing, and a mask.

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, n_outputs), as returned by ``FittedChain.predict``.

    Returns
    -------
    DataFrame of shape (n_rows, 2 * n_outputs), same index: each column (integers as int64,
    numbers as float64, booleans as bool, text as str; a missing value filled with 0, 0.0, False
    or "") followed by its boolean mask :func:`null_mask_name` (True where the value is null).
    """
    out: dict[str, Any] = {}
    for name, column in frame.items():
        missing = column.isna().to_numpy(dtype=bool)
        dtype = column.dtype
        if pd.api.types.is_bool_dtype(dtype):
            values: Any = column.astype("boolean").fillna(False).to_numpy(dtype=bool)
        elif pd.api.types.is_integer_dtype(dtype):
            values = column.astype("Int64").to_numpy(dtype="int64", na_value=0)
        elif pd.api.types.is_numeric_dtype(dtype):
            values = column.astype("Float64").to_numpy(dtype="float64", na_value=0.0)
        else:
            values = np.array(["" if m else str(v) for v, m in zip(column.tolist(), missing)], dtype=object)
        out[name] = values
        out[null_mask_name(name)] = missing
    return pd.DataFrame(out, index=frame.index)


def expression_columns(expression: str) -> list[str]:
    """The column names a pandas expression reads (every bare name but True/False), sorted."""
    import ast

    names = {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}
    return sorted(names - {"True", "False"})


def derive_label(frame: pd.DataFrame, *, column: str, expression: str | None) -> pd.Series:
    """The label of each row: ``frame[column]``, or ``expression`` evaluated with ``DataFrame.eval``.

    A derived label is missing (pd.NA) wherever a column the expression reads is missing, so
    ``arr_delay > 15`` on a cancelled flight is unknown, not False. Boolean labels become Int64 0/1.

    Raises
    ------
    InputError
        When the column is absent or the expression reads a column the frame lacks.
    """
    if expression is None:
        require_columns(frame, [column], what="the label")
        label = frame[column]
    else:
        names = expression_columns(expression)
        require_columns(frame, names, what=f"label expression {expression!r}")
        label = pd.Series(frame.eval(expression), index=frame.index)
        known = frame[names].notna().all(axis=1)
        label = label.astype(object).where(known, None)
        label = pd.Series(pd.array(label.tolist(), dtype="boolean" if label.dropna().map(type).eq(bool).all() else None),
                          index=frame.index)
    if pd.api.types.is_bool_dtype(label.dtype):
        label = label.astype("Int64")
    return label.rename(column)


def spark_arrow_schema(schema: Any) -> Any:
    """The Arrow schema of a Spark ``StructType``, timestamps as UTC microseconds, on every pyspark
    the project runs (4.2 locally, 4.1 on Databricks Runtime 18 LTS).

    pyspark 4.2's ``to_arrow_schema`` needs ``timezone="UTC"`` for timestamps; 4.1's has no such
    argument and makes them UTC-aware by default (``timestamp_utc=True``).

    Returns
    -------
    pyarrow.Schema
        Field names, types and nullability of ``schema``.
    """
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema  # pyspark only where a Spark schema is converted

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)
