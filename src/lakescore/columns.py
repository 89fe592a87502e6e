"""``Columns``: a batch of rows held as one array per column, what a compiled chain's kernels read and write.

Each column is the 1-D array a pandas column would hold (a numpy array, or a pandas extension array
such as Int64, Float64, boolean or string), so the frame a step's reference ``apply`` would see can
be rebuilt exactly, dtypes and index included (:meth:`Columns.frame`). There is no per-step frame
copy and no index alignment: a kernel reads arrays and sets new ones.

Rules for kernels: never write into an array you read (set a new one); return float64 numpy arrays
where the reference step returns float64 columns, so the two agree dtype for dtype.

:func:`float_values` and :func:`text_values` are how every step reads a pandas column as numbers or
as category text; :meth:`Columns.floats` and :meth:`Columns.texts` give exactly what they give on the
same column, with fast paths for the common dtypes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lakescore.errors import StepError
from lakescore.frames import array_of, column_arrays, frame_of


class Columns:
    """Rows ``index`` of a batch, as ``name -> 1-D array`` (each of length ``len(index)``)."""

    __slots__ = ("arrays", "index")

    def __init__(self, arrays: dict[str, Any], index: pd.Index) -> None:
        self.arrays = arrays
        self.index = index

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, names: Iterable[str]) -> Columns:
        """The columns ``names`` of ``frame``, not copied: a numpy column comes as a read-only view
        of the frame's own array, so a kernel that writes into what it reads fails loudly instead
        of changing the caller's frame."""
        return cls({name: _read_only(values) for name, values in column_arrays(frame, names)}, frame.index)

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def array(self, name: str) -> Any:
        """The column's array as stored (numpy or pandas extension array); never write into it."""
        return self.arrays[name]

    def floats(self, name: str, *, step: str) -> np.ndarray:
        """The column as float64, shape (n_rows,), missing as NaN (what ``float_values`` gives).

        Raises
        ------
        StepError
            When the column holds text that is not a number (the message names ``step``).
        """
        values = self.arrays[name]
        if isinstance(values, np.ndarray) and values.dtype.kind in "fiub":
            return values if values.dtype == np.float64 else values.astype("float64")
        if isinstance(values, (pd.arrays.IntegerArray, pd.arrays.FloatingArray, pd.arrays.BooleanArray)):  # NA: NaN
            return values.to_numpy(dtype="float64", na_value=np.nan)
        return float_values(self.frame([name]), name, step=step)

    def float_matrix(self, names: list[str], *, step: str) -> np.ndarray:
        """:meth:`floats` of each column, stacked: float64 array of shape (n_rows, len(names))."""
        if not names:
            return np.empty((len(self), 0), dtype="float64", order="F")
        arrays = self.arrays
        columns = [values if type(values) is np.ndarray and values.dtype is _FLOAT64 else self.floats(name, step=step)
                   for name, values in ((name, arrays[name]) for name in names)]
        return np.concatenate(columns).reshape(len(columns), len(self)).T  # (n_rows, n_columns), Fortran order

    def texts(self, name: str) -> np.ndarray:
        """The column as text, object array of shape (n_rows,), missing as None (what ``text_values`` gives)."""
        values = self.arrays[name]
        if isinstance(values, np.ndarray) and values.dtype.kind in "iub":  # "1", "True": str() of each value
            return values.astype(str).astype(object)
        if text_or_missing(values) is not None:
            missing = pd.isna(values)
            if missing.any():
                values = values.copy()
                values[missing] = None
            return values
        return text_values(self.frame([name]), name)

    def set(self, name: str, values: Any) -> None:
        """Set (or add) column ``name``: an array of length ``len(self)``."""
        self.arrays[name] = values

    def set_block(self, names: Iterable[str], block: np.ndarray) -> None:
        """Set (or add) the columns ``names`` to the columns of ``block``, shape (n_rows, len(names)),
        in order (each column a view of ``block``)."""
        self.arrays.update(zip(names, block.T))

    def drop(self, names: Iterable[str]) -> None:
        """Remove the columns ``names`` (a name the batch lacks is skipped)."""
        for name in names:
            self.arrays.pop(name, None)

    def keep(self, rows: np.ndarray) -> None:
        """Keep only the rows where the boolean array ``rows`` (n_rows,) is True, in order."""
        self.arrays = {name: values[rows] for name, values in self.arrays.items()}
        self.index = self.index[rows]

    def frame(self, names: Iterable[str], *, copy: bool = False) -> pd.DataFrame:
        """A pandas frame of the columns ``names`` with this batch's index and each column's own
        dtype (an object array stays object, even of Timestamps); its arrays are the batch's own
        unless ``copy``."""
        if copy:  # a frame the caller may change: fresh arrays, so the frame may hold them in blocks
            return frame_of({name: self.arrays[name].copy() for name in names}, self.index)
        return pd.DataFrame({name: pd.Series(self.arrays[name], index=self.index, dtype=self.arrays[name].dtype,
                                             copy=copy) for name in names}, index=self.index, copy=False)

    def replace(self, read: Iterable[str], result: pd.DataFrame) -> None:
        """Take a reference step's output frame: columns it returns are set, columns it read and no
        longer returns are dropped."""
        gone = [name for name in read if name not in result.columns]
        self.drop(gone)
        for name in result.columns:
            self.arrays[name] = _array_of(result[name])


def _is_number(value: Any) -> bool:
    """True when ``float(value)`` takes it (``'4500.0'`` too) or it is missing: the values that
    :func:`float_values` converts, so the one it quotes is the one that failed."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def float_values(frame: pd.DataFrame, column: str, *, step: str) -> np.ndarray:
    """The values of ``column`` as a float64 array of shape (n_rows,), missing as NaN.

    Works for int64, nullable Int64/Float64/boolean (pd.NA becomes NaN), float and numeric object
    columns. Element-wise, so a row's value never depends on its batch.

    Raises
    ------
    StepError
        When the column holds text that is not a number, naming the step, the column and the first
        value that failed (``'n/a'``, not a number-like ``'4500.0'`` before it).
    """
    series = frame[column]
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in "iubf":  # no missing value but NaN
        return series.to_numpy().astype("float64")  # what to_numpy(dtype, na_value) gives, a new array
    try:
        return series.to_numpy(dtype="float64", na_value=np.nan)
    except (TypeError, ValueError) as err:
        sample = next((v for v in series if not _is_number(v)), series.iloc[0] if len(series) else None)
        raise StepError(
            f"step '{step}' needs numbers in column '{column}' but found {sample!r}; encode the "
            "column first (OneHotEncoder, OrdinalEncoder) or cast it (Casting to: Float64)",
            step=step, column=column,
        ) from err


def text_values(frame: pd.DataFrame, column: str) -> np.ndarray:
    """The values of ``column`` as strings (object array of shape (n_rows,)), missing as None.

    Integers print without a decimal point in int64 and Int64 columns alike (``1``), floats with
    one (``1.0``), so a category's text depends only on the column's dtype, never on the batch.
    """
    series = frame[column]
    values = series.to_numpy() if series.dtype == object else None
    if values is not None and all(type(v) is str or v is None for v in values):
        return values.copy()  # already text and None: what the string round trip gives, without it
    return series.astype("string").to_numpy(dtype=object, na_value=None)


def _read_only(values: Any) -> Any:
    """A read-only view of a numpy array (the array itself stays writable); other arrays as they are."""
    if isinstance(values, np.ndarray):
        values = values.view()
        values.flags.writeable = False
    return values


def text_or_missing(values: Any) -> np.ndarray | None:
    """An object array that holds only text and missing values, as it is; None for anything else
    (another dtype, or an object array holding numbers, dates...)."""
    if isinstance(values, np.ndarray) and values.dtype == object \
            and pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        return values
    return None


_FLOAT64 = np.dtype("float64")


def _array_of(series: pd.Series) -> Any:
    """A column's values: the numpy array for numpy dtypes, the extension array otherwise."""
    return array_of(series)


@dataclass(frozen=True)
class Kernel:
    """A fitted step compiled to arrays.

    ``apply(columns)`` edits the batch in place (sets new arrays, drops columns); ``flags(columns)``,
    for a step that excludes rows, gives a boolean array of shape (n_rows,), True where the step
    excludes the row. Both read only each row's own values and the step's saved state, as the
    step's reference ``apply``/``flags`` do, and must give the same values and dtypes."""

    apply: Callable[[Columns], None]
    flags: Callable[[Columns], np.ndarray] | None = None
