"""Scaling steps. scikit-learn learns the statistics; apply is element-wise arithmetic.

Every scaler reads numeric columns (int, Int64, float; missing values pass through as NaN), learns
on the non-missing training values, and writes float64 columns computed with the same formula as
the sklearn ``transform`` it mirrors, so a row's value never depends on its batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel, float_values
from lakescore.errors import StepError
from lakescore.frames import replace_columns
from lakescore.steps.base import StepKind, StepParams, float_matrix, register


def _fit(sk: Any, frame: pd.DataFrame, params: StepParams) -> Any:
    """Fit an sklearn scaler on the columns (NaN is ignored by sklearn's scalers)."""
    return sk.fit(float_matrix(frame, params.columns, step=params.name))


# A per-column formula: (float64 values of shape (n_rows,), that column's saved terms...) -> new
# float64 array. ``apply`` and ``kernel`` of each element-wise step below run the same formula.
Formula = Callable[..., np.ndarray]


def _terms(state: dict[str, Any], keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """``(column, state[key][i] for key in keys)`` per column of the step."""
    return list(zip(state["columns"], *(state[key] for key in keys)))


def _apply_each(frame: pd.DataFrame, state: dict[str, Any], kind: str, formula: Formula,
                keys: tuple[str, ...]) -> pd.DataFrame:
    """The reference: each column of ``frame`` replaced by ``formula(float_values, *terms)``."""
    return replace_columns(frame, [tuple(t) for t in _terms(state, keys)],
                           lambda f, t: formula(float_values(f, t[0], step=kind), *t[1:]))


def _kernel_each(state: dict[str, Any], kind: str, formula: Formula, keys: tuple[str, ...]) -> Kernel:
    """The compiled form of :func:`_apply_each`: the terms read from ``state`` once, then per batch
    each column set to ``formula(batch.floats(column), *terms)`` (a new float64 array)."""
    terms = _terms(state, keys)

    def apply(batch: Columns) -> None:
        for column, *values in terms:
            batch.set(column, formula(batch.floats(column, step=kind), *values))

    return Kernel(apply)


def _centre_and_scale(x: np.ndarray, center: float, scale: float) -> np.ndarray:
    """``(x - center) / scale`` (StandardScaler, RobustScaler)."""
    return (x - center) / scale


def _clip(x: np.ndarray, low: float | None, high: float | None) -> np.ndarray:
    """``x`` clipped to ``[low, high]``; a None bound is no bound (ClipValues, Winsorize)."""
    return np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)


class StandardScalerParams(StepParams):
    with_mean: bool = True
    with_std: bool = True


@register
class StandardScaler(StepKind):
    """``(x - mean) / scale`` per column, mean and scale from sklearn ``StandardScaler``.

    A constant training column has scale 1.0 (sklearn's rule), so it only loses its mean.
    """

    kind = "StandardScaler"
    Params = StandardScalerParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import StandardScaler as Sk

        scaler = _fit(Sk(with_mean=params.with_mean, with_std=params.with_std), frame, params)
        n = len(params.columns)
        mean = scaler.mean_.tolist() if params.with_mean else [0.0] * n
        scale = scaler.scale_.tolist() if params.with_std else [1.0] * n
        return {"mean": mean, "scale": scale}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return _apply_each(frame, state, "StandardScaler", _centre_and_scale, ("mean", "scale"))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``(x - mean) / scale`` per column, terms from ``state``."""
        return _kernel_each(state, "StandardScaler", _centre_and_scale, ("mean", "scale"))


class MinMaxScalerParams(StepParams):
    feature_range: tuple[float, float] = (0.0, 1.0)
    clip: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> MinMaxScalerParams:
        if not self.feature_range[0] < self.feature_range[1]:
            raise ValueError(f"feature_range must be [low, high] with low < high; got {list(self.feature_range)}")
        return self


@register
class MinMaxScaler(StepKind):
    """``x * scale + min`` per column (sklearn ``MinMaxScaler``), optionally clipped to the range."""

    kind = "MinMaxScaler"
    Params = MinMaxScalerParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import MinMaxScaler as Sk

        scaler = _fit(Sk(feature_range=params.feature_range), frame, params)
        return {"scale": scaler.scale_.tolist(), "min": scaler.min_.tolist(),
                "range": list(params.feature_range), "clip": params.clip}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return _apply_each(frame, state, "MinMaxScaler", MinMaxScaler._formula(state), ("scale", "min"))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``x * scale + min`` per column (clipped to ``range`` when ``clip``), terms from ``state``."""
        return _kernel_each(state, "MinMaxScaler", MinMaxScaler._formula(state), ("scale", "min"))

    @staticmethod
    def _formula(state: dict[str, Any]) -> Formula:
        low, high = state["range"]
        clip = state["clip"]

        def formula(x: np.ndarray, scale: float, offset: float) -> np.ndarray:
            values = x * scale + offset
            return np.clip(values, low, high) if clip else values

        return formula


class RobustScalerParams(StepParams):
    with_centering: bool = True
    with_scaling: bool = True
    quantile_range: tuple[float, float] = (25.0, 75.0)

    @model_validator(mode="after")
    def _ordered(self) -> RobustScalerParams:
        low, high = self.quantile_range
        if not 0 <= low < high <= 100:
            raise ValueError(f"quantile_range must satisfy 0 <= low < high <= 100; got {[low, high]}")
        return self


@register
class RobustScaler(StepKind):
    """``(x - median) / iqr`` per column (sklearn ``RobustScaler``; a zero range scales by 1.0)."""

    kind = "RobustScaler"
    Params = RobustScalerParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import RobustScaler as Sk

        scaler = _fit(Sk(with_centering=params.with_centering, with_scaling=params.with_scaling,
                         quantile_range=params.quantile_range), frame, params)
        n = len(params.columns)
        center = scaler.center_.tolist() if params.with_centering else [0.0] * n
        scale = scaler.scale_.tolist() if params.with_scaling else [1.0] * n
        return {"center": center, "scale": scale}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return _apply_each(frame, state, "RobustScaler", _centre_and_scale, ("center", "scale"))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``(x - center) / scale`` per column, terms from ``state``."""
        return _kernel_each(state, "RobustScaler", _centre_and_scale, ("center", "scale"))


@register
class MaxAbsScaler(StepKind):
    """``x / max|x|`` per column (sklearn ``MaxAbsScaler``; an all-zero column scales by 1.0)."""

    kind = "MaxAbsScaler"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: StepParams) -> dict[str, Any]:
        from sklearn.preprocessing import MaxAbsScaler as Sk

        return {"scale": _fit(Sk(), frame, params).scale_.tolist()}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return _apply_each(frame, state, "MaxAbsScaler", np.divide, ("scale",))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``x / scale`` per column, ``scale`` from ``state``."""
        return _kernel_each(state, "MaxAbsScaler", np.divide, ("scale",))


class ClipValuesParams(StepParams):
    lower: float | None = None
    upper: float | None = None
    bounds: dict[str, tuple[float | None, float | None]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _some_bound(self) -> ClipValuesParams:
        unknown = sorted(set(self.bounds) - set(self.columns))
        if unknown:
            raise ValueError(f"bounds name column(s) {unknown} that are not in columns")
        for column in self.columns:
            low, high = self.bounds.get(column, (self.lower, self.upper))
            if low is None and high is None:
                raise ValueError(f"column {column!r} has neither a lower nor an upper bound; set lower/upper")
            if low is not None and high is not None and low > high:
                raise ValueError(f"column {column!r}: lower {low} is above upper {high}")
        return self


@register
class ClipValues(StepKind):
    """Clip each value to fixed ``[lower, upper]`` bounds from the config (per column via ``bounds``).

    Nothing is learned from the rows, so the step may run pre-split. Missing stays missing.
    """

    kind = "ClipValues"
    Params = ClipValuesParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        pairs = [params.bounds.get(c, (params.lower, params.upper)) for c in params.columns]
        return {"lower": [p[0] for p in pairs], "upper": [p[1] for p in pairs]}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return _apply_each(frame, state, "ClipValues", _clip, ("lower", "upper"))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column clipped to its ``lower``/``upper`` from ``state`` (None: unbounded)."""
        return _kernel_each(state, "ClipValues", _clip, ("lower", "upper"))


class WinsorizeParams(StepParams):
    lower_quantile: float = Field(default=0.01, ge=0, le=0.5)
    upper_quantile: float = Field(default=0.99, ge=0.5, le=1)


@register
class Winsorize(StepKind):
    """Clip each value to the training quantiles ``[q(lower_quantile), q(upper_quantile)]``.

    Quantiles use numpy's linear interpolation over the non-missing training values.
    """

    kind = "Winsorize"
    Params = WinsorizeParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        data = float_matrix(frame, params.columns, step=params.name)
        if not len(data) or np.isnan(data).all(axis=0).any():
            raise StepError(f"step '{params.name}': a column of {params.columns} has no value in the "
                            "training rows; drop it from the step", step=params.name)
        low = np.nanquantile(data, params.lower_quantile, axis=0)
        high = np.nanquantile(data, params.upper_quantile, axis=0)
        return {"lower": low.tolist(), "upper": high.tolist()}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return _apply_each(frame, state, "Winsorize", _clip, ("lower", "upper"))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column clipped to its learned quantiles ``lower``/``upper`` from ``state``."""
        return _kernel_each(state, "Winsorize", _clip, ("lower", "upper"))
