"""Fixed edits: Casting and ValueReplacement.

Both learn nothing from the rows (they check the config against the training frame and save
it), so they may run in the ``pre_split:`` recipe. Each value is converted on its own, and the
output dtype is fixed by the config, never by what a batch happens to hold.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lakescore.columns import Columns, Kernel
from lakescore.errors import InputError, StepError
from lakescore.steps.arrays import MISSING, Positions, as_objects, object_values
from lakescore.steps.base import StepKind, StepParams, is_numeric, register

Target = Literal["Int64", "Float64", "boolean", "string", "int64", "float64"]
TRUE_TEXT = {"true", "t", "yes", "y", "1"}
FALSE_TEXT = {"false", "f", "no", "n", "0"}


class CastingParams(StepParams):
    to: Target


def _numbers(series: pd.Series) -> np.ndarray:
    """Element-wise numbers (float64): numeric values as they are, text parsed, else NaN."""
    if is_numeric(series) or pd.api.types.is_bool_dtype(series.dtype):
        return series.to_numpy(dtype="float64", na_value=np.nan)
    return pd.to_numeric(series.astype(object), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _first_not_whole(series: pd.Series) -> Any:
    """The first present value that is not a whole number (``'n/a'`` in ``['4500', 'n/a']``), else
    the first present value, else None: the value to quote when a column is refused."""
    present = series.dropna()
    numbers = _numbers(present)
    bad = present[~(np.isfinite(numbers) & (numbers == np.trunc(numbers)))]
    return bad.iloc[0] if len(bad) else present.iloc[0] if len(present) else None


def _truth(value: Any) -> bool | None:
    """One value as a boolean: true/false text (true, t, yes, y, 1 / false, f, no, n, 0, read
    after ``str``, strip, lower and a trailing ``.0`` cut), so numbers 1 and 0 too; else None."""
    text = str(value).strip().lower() if value is not None and not pd.isna(value) else None
    if text is not None and text.endswith(".0"):
        text = text[:-2]
    return True if text in TRUE_TEXT else False if text in FALSE_TEXT else None


def _booleans(series: pd.Series) -> pd.arrays.BooleanArray:
    """Element-wise booleans: true/false text (true, t, yes, y, 1 / false, f, no, n, 0), numbers
    1 and 0; anything else is missing."""
    return pd.array([_truth(value) for value in series.astype(object).tolist()], dtype="boolean")


def _not_whole(step: str, column: Any, value: Any) -> InputError:
    return InputError(f"step '{step}' casts column '{column}' to plain int64, but a row holds "
                      f"{value!r}; cast to Int64 (nullable) instead", step=step)


def _numbers_as(numbers: np.ndarray, to: str) -> Any:
    """Float64 numbers (n_rows,) as ``to``: Float64, float64, Int64 (whole numbers kept, the rest
    missing) or int64 (the caller has checked that every value is whole)."""
    if to in ("Float64", "float64"):
        return pd.array(numbers, dtype="Float64") if to == "Float64" else numbers
    if to == "Int64":
        whole = _whole(numbers)
        if (np.abs(numbers[whole]) < 2.0 ** 63).all():  # every whole number fits int64
            return pd.arrays.IntegerArray(np.where(whole, numbers, 0).astype("int64"), ~whole)
        return pd.array(np.where(whole, numbers, np.nan), dtype="Float64").astype("Int64")  # pandas' error
    return numbers.astype("int64")


def _whole(numbers: np.ndarray) -> np.ndarray:
    return np.isfinite(numbers) & (numbers == np.trunc(numbers))


def cast_series(series: pd.Series, to: str, *, step: str) -> Any:
    """Convert one column, value by value, to the dtype ``to``.

    Int64 keeps whole numbers (a fractional or unparseable value becomes missing), Float64 and
    float64 keep every number, string prints the value (``1`` for integer columns, ``1.0`` for
    float ones), boolean reads true/false text and 1/0.

    Raises
    ------
    InputError
        When a plain int64 cast meets a missing or non-integer value (fix: cast to Int64).
    """
    if to == "string":
        return series.astype("string")
    if to == "boolean":
        return _booleans(series)
    numbers = _numbers(series)
    if to == "int64":
        whole = _whole(numbers)
        if not whole.all():
            raise _not_whole(step, series.name, series[~whole].iloc[0])
    return _numbers_as(numbers, to)


# --- the same conversions on a column's array, for the compiled kernels ---------------------

def _number_values(values: Any) -> np.ndarray:
    """What :func:`_numbers` gives for a column holding the array ``values``."""
    if pd.api.types.is_numeric_dtype(values.dtype) or pd.api.types.is_bool_dtype(values.dtype):
        if isinstance(values, np.ndarray):
            return values.astype("float64", copy=False)
        return values.to_numpy(dtype="float64", na_value=np.nan)
    return np.asarray(pd.to_numeric(object_values(values), errors="coerce"), dtype="float64")


# object columns whose equal values always print the same (1 == 1.0 == True, 0 == -0.0 do not)
_ONE_TEXT_PER_VALUE = ("string", "empty", "integer", "boolean")


def _boolean_values(values: Any) -> pd.arrays.BooleanArray:
    """What :func:`_booleans` gives for a column holding the array ``values``: numbers by value
    (1 is true; 0 false, but not -0.0, whose text is '-0.0'), text once per distinct value."""
    if pd.api.types.is_numeric_dtype(values.dtype):
        numbers = _number_values(values)
        true, false = numbers == 1, (numbers == 0) & ~np.signbit(numbers)
        return pd.arrays.BooleanArray(true, ~(true | false))
    objects = object_values(values)
    if pd.api.types.infer_dtype(objects, skipna=True) in _ONE_TEXT_PER_VALUE:
        codes, distinct = pd.factorize(objects)
        table = np.empty(len(distinct) + 1, dtype=object)
        table[:] = [_truth(v) for v in distinct] + [None]
        return pd.array(table[codes], dtype="boolean")
    return pd.array([_truth(v) for v in objects], dtype="boolean")  # mixed objects: one by one


def _string_values(values: Any) -> Any:
    """What ``Series.astype("string")`` gives for a column holding the array ``values``."""
    if isinstance(values, np.ndarray) and values.dtype.kind not in "mM":
        return pd.array(values, dtype="string")
    return pd.array(values, copy=False).astype("string")


def cast_values(values: Any, to: str, *, step: str, column: str) -> Any:
    """:func:`cast_series` on a column's array (numpy or pandas extension array, shape (n_rows,)):
    the same values and dtype, without building a Series.

    Raises
    ------
    InputError
        When a plain int64 cast meets a missing or non-integer value (fix: cast to Int64).
    """
    if to == "string":
        return _string_values(values)
    if to == "boolean":
        return _boolean_values(values)
    numbers = _number_values(values)
    if to == "int64":
        whole = _whole(numbers)
        if not whole.all():
            raise _not_whole(step, column, values[np.flatnonzero(~whole)[0]])
    return _numbers_as(numbers, to)


@register
class Casting(StepKind):
    """Cast columns to ``Int64``, ``Float64``, ``boolean``, ``string`` (nullable) or plain
    ``int64``/``float64``.

    A plain ``int64`` cast of a column that holds text or missing values is refused at learn time:
    its dtype would change with the batch (a batch with a missing value cannot be int64). The fix
    is "cast to Int64".
    """

    kind = "Casting"
    Params = CastingParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        if params.to == "int64":
            for column in params.columns:
                series = frame[column]
                text = not is_numeric(series)
                if text or series.isna().any():
                    what = "text" if text else "missing values"
                    raise StepError(
                        f"step '{params.name}': column '{column}' holds {what} (e.g. "
                        f"{_first_not_whole(series) if text else None!r}), so a "
                        "plain int64 cast would change dtype from batch to batch; cast to Int64 "
                        "(to: Int64)", step=params.name, column=column)
        return {"to": params.to}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column in state["columns"]:
            frame[column] = cast_series(frame[column], state["to"], step="Casting")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column's array cast to ``state["to"]`` by :func:`cast_values`."""
        columns, to = list(state["columns"]), state["to"]

        def apply(batch: Columns) -> None:
            for column in columns:
                batch.set(column, cast_values(batch.array(column), to, step="Casting", column=column))

        return Kernel(apply)


class ReplacementParams(StepParams):
    replace: list[tuple[float | int | str | bool | None, float | int | str | bool | None]] = Field(
        default_factory=list)
    to_missing: list[float | int | str | bool] = Field(default_factory=list)

    def pairs(self) -> list[list[Any]]:
        return [[a, b] for a, b in self.replace] + [[v, None] for v in self.to_missing]


def _output_dtype(series: pd.Series, news: list[Any]) -> str:
    """The dtype of a replaced column, from the training column and the new values only."""
    present = [v for v in news if v is not None]
    if is_numeric(series) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        integer = pd.api.types.is_integer_dtype(series.dtype)
        return "Int64" if integer and all(float(v).is_integer() for v in present) else "float64"
    return "object"


@register
class ValueReplacement(StepKind):
    """Replace listed values: ``replace: [[old, new], ...]`` and ``to_missing: [v, ...]``.

    The output dtype is fixed at learn time from the column and the new values: an integer column
    becomes nullable Int64, a float column float64, anything else object. E.g.
    ``{step: ValueReplacement, name: no_sentinel, columns: [dep_delay], to_missing: [-999]}``.
    """

    kind = "ValueReplacement"
    Params = ReplacementParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        pairs = params.pairs()
        if not pairs:
            raise StepError(f"step '{params.name}': nothing to replace; give replace: [[old, new]] or "
                            "to_missing: [value]", step=params.name)
        dtypes = [_output_dtype(frame[c], [b for _, b in pairs]) for c in params.columns]
        return {"pairs": pairs, "dtypes": dtypes}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, dtype in zip(state["columns"], state["dtypes"]):
            values = frame[column].astype(object)
            out = values.copy()
            for old, new in state["pairs"]:
                match = values.isna() if old is None else values.isin([old]) & values.notna()
                out = out.where(~match, new)
            if dtype == "object":
                frame[column] = out.where(out.notna(), None).astype(object)
            else:
                frame[column] = cast_series(out.rename(column), "Int64" if dtype == "Int64" else "float64",
                                            step="ValueReplacement")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each value's pair found among the listed old values (:class:`Positions`: equal as Python
        compares them, the last pair of an old value wins), a missing value given the last
        ``[None, new]``; then the output dtype of ``state["dtypes"]``."""
        valued = [(old, new) for old, new in state["pairs"] if old is not None and not pd.isna(old)]
        olds = Positions(old for old, _ in valued)  # a missing value only matches a None pair
        news = as_objects([new for _, new in valued])
        missing_news = [new for old, new in state["pairs"] if old is None]
        columns = list(zip(state["columns"], state["dtypes"]))

        def apply(batch: Columns) -> None:
            for column, dtype in columns:
                values = object_values(batch.array(column))
                found = olds.of(values)
                hit = found >= 0
                out = values.copy()
                out[hit] = news[found[hit]]
                if missing_news:
                    out[found == MISSING] = missing_news[-1]
                if dtype == "object":
                    out[pd.isna(out)] = None
                    batch.set(column, out)
                else:
                    batch.set(column, _numbers_as(_number_values(out), dtype))

        return Kernel(apply)
