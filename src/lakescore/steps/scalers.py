"""Scaling steps. scikit-learn learns the statistics; apply is element-wise arithmetic.

Every scaler reads numeric columns (int, Int64, float; missing values pass through as NaN), learns
on the non-missing training values, and writes float64 columns computed with the same formula as
the sklearn ``transform`` it mirrors, so a row's value never depends on its batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, float_values, register


def _fit(sk: Any, frame: pd.DataFrame, params: StepParams) -> Any:
    """Fit an sklearn scaler on the columns (NaN is ignored by sklearn's scalers)."""
    return sk.fit(float_matrix(frame, params.columns, step=params.name))


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
        for column, mean, scale in zip(state["columns"], state["mean"], state["scale"]):
            frame[column] = (float_values(frame, column, step="StandardScaler") - mean) / scale
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        terms = list(zip(state["columns"], state["mean"], state["scale"]))

        def apply(batch: Columns) -> None:
            for column, mean, scale in terms:
                batch.set(column, (batch.floats(column, step="StandardScaler") - mean) / scale)

        return Kernel(apply)


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
        low, high = state["range"]
        for column, scale, offset in zip(state["columns"], state["scale"], state["min"]):
            values = float_values(frame, column, step="MinMaxScaler") * scale + offset
            frame[column] = np.clip(values, low, high) if state["clip"] else values
        return frame


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
        for column, center, scale in zip(state["columns"], state["center"], state["scale"]):
            frame[column] = (float_values(frame, column, step="RobustScaler") - center) / scale
        return frame


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
        for column, scale in zip(state["columns"], state["scale"]):
            frame[column] = float_values(frame, column, step="MaxAbsScaler") / scale
        return frame


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
        return _clip(frame, state, "ClipValues")


def _clip(frame: pd.DataFrame, state: dict[str, Any], kind: str) -> pd.DataFrame:
    for column, low, high in zip(state["columns"], state["lower"], state["upper"]):
        values = float_values(frame, column, step=kind)
        frame[column] = np.clip(values, -np.inf if low is None else low, np.inf if high is None else high)
    return frame


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
        return _clip(frame, state, "Winsorize")
