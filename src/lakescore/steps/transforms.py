"""Element-wise transformations: SimpleTransformation and GeneralTransformation.

Both compute each value from itself alone and give float64 columns (missing as NaN); neither
learns from the rows, so both may run in the ``pre_split:`` recipe.

SimpleTransformation's functions and their domains (a value outside is *invalid*):

==========  =====================  ==================================
function    value                  invalid
==========  =====================  ==================================
log         ln(x)                  x <= 0
log1p       ln(1 + x)              x <= -1
sqrt        sqrt(x)                x < 0
square      x * x                  result overflows (|x| > 1.34e154)
reciprocal  1 / x                  x == 0
exp         e ** x                 result overflows (x > 709.78)
==========  =====================  ==================================

An infinite input is invalid for every function. ``on_invalid`` declares what an invalid value
gives:

- ``null`` (default): NaN, a missing value for a later imputer;
- ``exclude``: the row is excluded at scoring (``invalid:<step>``) and dropped at training;
- ``error``: training stops when a training value is invalid (the message names the column, the
  count and the first value); at scoring an invalid value gives NaN, since refusing a whole batch
  for one row would make a row's answer depend on its batch.

GeneralTransformation applies one numpy ufunc from an allow-list (:data:`UFUNCS`); a value outside
the function's domain (``log10(-1)``, ``arcsin(2)``) or a non-finite result gives NaN.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register

Function = Literal["log", "log1p", "sqrt", "square", "reciprocal", "exp"]
OnInvalid = Literal["null", "exclude", "error"]


def _invalid(x: np.ndarray, function: str) -> np.ndarray:
    """True per present value outside ``function``'s domain or whose result overflows (NaN: False)."""
    with np.errstate(invalid="ignore", over="ignore"):
        bad = np.isinf(x)
        if function == "log":
            bad |= x <= 0
        elif function == "log1p":
            bad |= x <= -1
        elif function == "sqrt":
            bad |= x < 0
        elif function == "reciprocal":
            bad |= x == 0
        elif function == "square":
            bad |= np.isinf(x * x)
        else:
            bad |= np.isinf(np.exp(x))
    return bad


def _transform(x: np.ndarray, function: str) -> np.ndarray:
    """Float64 (n_rows,): ``function`` of each value; NaN where the value is missing or invalid."""
    bad = _invalid(x, function)
    with np.errstate(all="ignore"):
        if function == "log":
            out = np.log(x)
        elif function == "log1p":
            out = np.log1p(x)
        elif function == "sqrt":
            out = np.sqrt(x)
        elif function == "square":
            out = x * x
        elif function == "reciprocal":
            out = 1.0 / x
        else:
            out = np.exp(x)
    return np.where(bad, np.nan, out).astype("float64")


class SimpleParams(StepParams):
    function: Function
    on_invalid: OnInvalid = "null"


@register
class SimpleTransformation(StepKind):
    """Replace each column by ``function`` of its values: log, log1p, sqrt, square, reciprocal or
    exp, with the declared ``on_invalid`` (null | exclude | error; see the module doc).
    E.g. ``{step: SimpleTransformation, name: log_distance, columns: [distance], function: log}``.
    """

    kind = "SimpleTransformation"
    Params = SimpleParams
    exclusion = "invalid"
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        if params.on_invalid == "error":
            for column in params.columns:
                x = float_matrix(frame, [column], step=params.name)[:, 0]
                bad = _invalid(x, params.function)
                if bad.any():
                    raise StepError(
                        f"step '{params.name}': {int(bad.sum())} training value(s) of column '{column}' are outside "
                        f"the domain of {params.function} (e.g. {float(x[bad][0])!r}) and on_invalid is 'error'; fix the "
                        "data, or set on_invalid: null (NaN) or exclude (drop the row)", step=params.name,
                        column=column)
        return {"function": params.function, "on_invalid": params.on_invalid}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="SimpleTransformation")
        for i, column in enumerate(state["columns"]):
            frame[column] = _transform(data[:, i], state["function"])
        return frame

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        if state["on_invalid"] != "exclude":
            return np.zeros(len(frame), dtype=bool)
        return _any_invalid(float_matrix(frame, state["columns"], step="SimpleTransformation"), state["function"])

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column as float64 through ``function``; with ``on_invalid: exclude``, flags the rows
        with an invalid value."""
        columns, function = list(state["columns"]), state["function"]

        def apply(batch: Columns) -> None:
            for column in columns:
                batch.set(column, _transform(batch.floats(column, step="SimpleTransformation"), function))

        def flags(batch: Columns) -> np.ndarray:
            if state["on_invalid"] != "exclude":
                return np.zeros(len(batch), dtype=bool)
            return _any_invalid(batch.float_matrix(columns, step="SimpleTransformation"), function)

        return Kernel(apply, flags)


def _any_invalid(data: np.ndarray, function: str) -> np.ndarray:
    """True per row (n_rows,) where a value of ``data`` (n_rows, n_columns) is invalid."""
    if data.shape[1] == 0:
        return np.zeros(len(data), dtype=bool)
    return np.column_stack([_invalid(data[:, j], function) for j in range(data.shape[1])]).any(axis=1)  # type: ignore[return-value]  # numpy's stub: any(axis=1) of a 2-D array is an array


UFUNCS = ("abs", "negative", "sign", "floor", "ceil", "rint", "trunc", "cbrt", "exp2", "expm1", "log2",
          "log10", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh",
          "arccosh", "arctanh", "deg2rad", "rad2deg")
"""The numpy ufuncs GeneralTransformation may apply: unary, element-wise, float in, float out."""
UFunc = Literal["abs", "negative", "sign", "floor", "ceil", "rint", "trunc", "cbrt", "exp2", "expm1", "log2",
                "log10", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh",
                "arccosh", "arctanh", "deg2rad", "rad2deg"]


class GeneralParams(StepParams):
    function: UFunc


@register
class GeneralTransformation(StepKind):
    """Replace each column by ``numpy.<function>`` of its values, for a unary ufunc of the
    allow-list :data:`UFUNCS` (abs, floor, log10, tanh, ...). Outside the function's domain, or
    where the result is infinite, the value is NaN. Output: float64.
    E.g. ``{step: GeneralTransformation, name: log10_distance, columns: [distance], function: log10}``.
    """

    kind = "GeneralTransformation"
    Params = GeneralParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        return {"function": params.function}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="GeneralTransformation")
        for i, column in enumerate(state["columns"]):
            frame[column] = _ufunc(data[:, i], state["function"])
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column as float64 through ``numpy.<function>``."""
        columns, function = list(state["columns"]), state["function"]

        def apply(batch: Columns) -> None:
            for column in columns:
                batch.set(column, _ufunc(batch.floats(column, step="GeneralTransformation"), function))

        return Kernel(apply)


def _ufunc(x: np.ndarray, function: str) -> np.ndarray:
    """Float64 (n_rows,): ``numpy.<function>(x)``, NaN where the result is not finite."""
    with np.errstate(all="ignore"):
        out = getattr(np, function)(x)
    return np.where(np.isfinite(out), out, np.nan).astype("float64")
