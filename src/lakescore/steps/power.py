"""PowerTransformer: Yeo-Johnson or Box-Cox per value, lambdas learned by scikit-learn.

Each value is transformed on its own. A value the transform cannot take — zero or negative with
Box-Cox, an infinity, or a result too large to represent — makes its row invalid: the chain
excludes it with ``invalid:<step>`` and the other rows are unaffected. A missing value is not
invalid; it stays missing for a later imputer.

The 10% rule: if more than 10% of the step's training rows would be invalid (missing values do not
count as invalid), training stops with an error naming the share, since a transform that refuses
that many rows does not fit the data.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register

MAX_INVALID_SHARE = 0.10


class PowerParams(StepParams):
    method: Literal["yeo-johnson", "box-cox"] = "yeo-johnson"
    standardize: bool = True


def yeo_johnson(x: np.ndarray, lmbda: float) -> np.ndarray:
    """Yeo-Johnson transform, element-wise, with scipy's ``_yeojohnson_transform`` expressions
    (``expm1``/``log1p`` forms), which sklearn's ``PowerTransformer.transform`` calls."""
    eps = np.finfo("float64").eps
    out = np.full(x.shape, np.nan)
    with np.errstate(all="ignore"):
        pos, neg = x >= 0, x < 0
        out[pos] = np.log1p(x[pos]) if abs(lmbda) < eps else np.expm1(lmbda * np.log1p(x[pos])) / lmbda
        if abs(lmbda - 2) > eps:
            out[neg] = -np.expm1((2 - lmbda) * np.log1p(-x[neg])) / (2 - lmbda)
        else:
            out[neg] = -np.log1p(-x[neg])
    return out


def box_cox(x: np.ndarray, lmbda: float) -> np.ndarray:
    """Box-Cox transform, element-wise (``scipy.special.boxcox``); NaN where ``x <= 0``."""
    from scipy.special import boxcox  # a ufunc; scipy ships with scikit-learn

    with np.errstate(all="ignore"):
        out = boxcox(x, lmbda)
    return np.where(x > 0, out, np.nan)


def _cannot_take(data: np.ndarray, method: str) -> np.ndarray:
    """True per value that the method cannot take (NaN is not such a value)."""
    bad = np.isinf(data)
    if method == "box-cox":
        with np.errstate(invalid="ignore"):
            bad |= data <= 0
    return bad


def _transform(data: np.ndarray, state: dict[str, Any]) -> np.ndarray:
    """The transformed, standardised values of ``data`` (n_rows, n_columns); NaN where missing or
    invalid. ``state["mean"]``/``state["scale"]`` may be lists or float64 arrays (a kernel's)."""
    fn = box_cox if state["method"] == "box-cox" else yeo_johnson
    out = np.column_stack([fn(col, lmbda) for col, lmbda in zip(data.T, state["lambdas"])])
    out = out.reshape(data.shape)
    with np.errstate(all="ignore"):
        out = (out - np.asarray(state["mean"])) / np.asarray(state["scale"])
    out[_cannot_take(data, state["method"]) | np.isinf(out)] = np.nan
    return out


def _invalid(data: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Rows (n_rows,) with a value that is present in ``data`` but has no transform in ``out``."""
    return (np.isnan(out) & ~np.isnan(data)).any(axis=1)


def check_invalid_share(step: str, data: np.ndarray, columns: list[str], method: str) -> np.ndarray:
    """Rows of the training data (n_rows, n_columns) the method cannot take.

    Raises
    ------
    StepError
        When more than 10% of the rows are invalid: the message names the share, a sample value
        and the fix (Yeo-Johnson, or repair the rows).
    """
    bad = _cannot_take(data, method)
    invalid = bad.any(axis=1)
    share = invalid.mean() if len(invalid) else 0.0  # type: ignore[arg-type]  # numpy's stub: any(axis=1) of a 2-D array is an array
    if share > MAX_INVALID_SHARE:
        row, col = np.argwhere(bad)[0]
        hint = ("zero or negative" if method == "box-cox" else "infinite")
        raise StepError(
            f"step '{step}' (PowerTransformer, {method}): {share:.1%} of its {len(invalid)} training "  # type: ignore[arg-type]  # as above
            f"rows ({int(invalid.sum())}) hold values it cannot transform ({hint}; e.g. column "
            f"'{columns[col]}' = {float(data[row, col])!r}); at most {MAX_INVALID_SHARE:.0%} may be. Use "
            "method: yeo-johnson, or repair those rows before this step.",
            step=step, share=float(share),
        )
    return invalid  # type: ignore[return-value]  # as above


@register
class PowerTransformer(StepKind):
    """Power transform per column with lambdas from sklearn ``PowerTransformer``, then (by default)
    standardised with the mean and scale of the transformed training values.

    Lambdas are fitted on the training rows the method can take; the others are flagged
    ``invalid:<step>`` (see the module docstring for the 10% rule).
    """

    kind = "PowerTransformer"
    Params = PowerParams
    exclusion = "invalid"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import PowerTransformer as Sk

        data = float_matrix(frame, params.columns, step=params.name)
        invalid = check_invalid_share(params.name, data, params.columns, params.method)
        good = data[~invalid]
        empty = [c for c, col in zip(params.columns, good.T) if np.isnan(col).all()]
        if empty:
            raise StepError(f"step '{params.name}': column(s) {empty} have no valid training value; "
                            "drop them from the step", step=params.name)
        from sklearn.preprocessing import StandardScaler

        model = Sk(method=params.method, standardize=False)
        transformed = model.fit_transform(good)
        n = len(params.columns)
        state: dict[str, Any] = {"method": params.method, "lambdas": model.lambdas_.tolist(),
                                 "mean": [0.0] * n, "scale": [1.0] * n}
        if params.standardize:  # sklearn standardises the transformed training values the same way
            scaler = StandardScaler().fit(transformed)
            state["mean"], state["scale"] = scaler.mean_.tolist(), scaler.scale_.tolist()
        return state

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        data = float_matrix(frame, state["columns"], step="PowerTransformer")
        return _invalid(data, _transform(data, state))

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        out = _transform(float_matrix(frame, state["columns"], step="PowerTransformer"), state)
        for i, column in enumerate(state["columns"]):
            frame[column] = out[:, i]
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``flags``: rows with a present value the transform cannot take; ``apply``: each column
        transformed with its lambda, then standardised with ``mean``/``scale`` (read from ``state``
        once, as float64 arrays)."""
        columns = list(state["columns"])
        arrays = {**state, "mean": np.asarray(state["mean"], dtype="float64"),
                  "scale": np.asarray(state["scale"], dtype="float64")}

        def flags(batch: Columns) -> np.ndarray:
            data = batch.float_matrix(columns, step="PowerTransformer")
            return _invalid(data, _transform(data, arrays))

        def apply(batch: Columns) -> None:
            out = np.asfortranarray(_transform(batch.float_matrix(columns, step="PowerTransformer"), arrays))
            for i, column in enumerate(columns):
                batch.set(column, out[:, i])

        return Kernel(apply=apply, flags=flags)
