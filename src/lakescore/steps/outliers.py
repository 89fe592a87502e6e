"""Outlier steps: bounds learned at training; a row outside them is excluded, never dropped.

Each step's ``flags`` reads only the row's own values and the saved state. A flagged row stays in
the chain's output with ``scoring_status = excluded`` and ``exclusion_reason = outlier:<step>``;
during training it is left out of every later step and of the fit. A missing value is never an
outlier. ``apply`` changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register


def _outside(data: np.ndarray, low: Any, high: Any) -> np.ndarray:
    """True where a row has a value below ``low`` or above ``high`` (NaN never counts)."""
    low = np.array([-np.inf if v is None else v for v in low], dtype="float64")
    high = np.array([np.inf if v is None else v for v in high], dtype="float64")
    with np.errstate(invalid="ignore"):
        return ((data < low) | (data > high)).any(axis=1)


class BoundsStep(StepKind):
    """Base of the steps that exclude a row outside per-column bounds ``state["low"]``/``state["high"]``
    (IQR, ZScore, ManualBounds). Their kernel is the same ``_outside`` test on the batch's float
    matrix; apply changes nothing."""

    @classmethod
    def kernel(cls, state: dict[str, Any]) -> Kernel:
        columns, low, high = list(state["columns"]), state["low"], state["high"]
        return Kernel(apply=lambda batch: None,
                      flags=lambda batch: _outside(batch.float_matrix(columns, step=cls.kind), low, high))


def _has_values(step: str, data: np.ndarray, columns: list[str]) -> None:
    empty = [c for c, col in zip(columns, data.T) if not np.isfinite(col).any()]
    if empty:
        raise StepError(f"step '{step}': column(s) {empty} have no finite value in the training rows, "
                        "so no bounds can be learned; drop them from the step", step=step)


class IQRParams(StepParams):
    factor: float = Field(default=1.5, gt=0)


@register
class IQR(BoundsStep):
    """Exclude a row when a value lies outside ``[q1 - factor*iqr, q3 + factor*iqr]``.

    Quartiles are learned on the training rows (numpy linear interpolation, missing values
    ignored). The rule is Tukey's fences, factor 1.5 by default.
    """

    kind = "IQR"
    Params = IQRParams
    exclusion = "outlier"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        data = float_matrix(frame, params.columns, step=params.name)
        _has_values(params.name, data, params.columns)
        q1, q3 = np.nanpercentile(data, [25, 75], axis=0)
        iqr = q3 - q1
        return {"low": (q1 - params.factor * iqr).tolist(), "high": (q3 + params.factor * iqr).tolist()}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return _outside(float_matrix(frame, state["columns"], step="IQR"), state["low"], state["high"])


class ZScoreParams(StepParams):
    threshold: float = Field(default=3.0, gt=0)


@register
class ZScore(BoundsStep):
    """Exclude a row when ``|x - mean| / std > threshold`` for a value (default 3 standard deviations).

    Mean and population standard deviation (ddof 0) come from the training rows; stored as the
    bounds ``mean -/+ threshold*std``. A constant training column excludes nothing.
    """

    kind = "ZScore"
    Params = ZScoreParams
    exclusion = "outlier"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        data = float_matrix(frame, params.columns, step=params.name)
        _has_values(params.name, data, params.columns)
        mean, std = np.nanmean(data, axis=0), np.nanstd(data, axis=0)
        low = [None if s == 0 else m - params.threshold * s for m, s in zip(mean, std)]
        high = [None if s == 0 else m + params.threshold * s for m, s in zip(mean, std)]
        return {"mean": mean.tolist(), "std": std.tolist(), "low": low, "high": high}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return _outside(float_matrix(frame, state["columns"], step="ZScore"), state["low"], state["high"])


class ManualBoundsParams(StepParams):
    lower: float | None = None
    upper: float | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> ManualBoundsParams:
        if self.lower is None and self.upper is None:
            raise ValueError("set lower, upper or both")
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"lower {self.lower} is above upper {self.upper}")
        return self


@register
class ManualBounds(BoundsStep):
    """Exclude a row when a value lies outside the fixed ``[lower, upper]`` from the config.

    Nothing is learned, and the check reads the row alone, so a pre-split use is re-applied at
    scoring as eligibility (``ineligible:<step>``) under scoring.yml ``mode: pre_split | combined``.
    """

    kind = "ManualBounds"
    Params = ManualBoundsParams
    exclusion = "outlier"
    fixed = True
    row_filter = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        n = len(params.columns)
        return {"low": [params.lower] * n, "high": [params.upper] * n}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return _outside(float_matrix(frame, state["columns"], step="ManualBounds"), state["low"], state["high"])


class EllipticParams(StepParams):
    contamination: float = Field(default=0.01, gt=0, le=0.5)
    support_fraction: float | None = Field(default=None, gt=0, le=1)
    random_state: int = 0


@register
class EllipticEnvelope(StepKind):
    """Exclude a row whose squared Mahalanobis distance to the robust centre exceeds the threshold.

    sklearn ``EllipticEnvelope`` (minimum covariance determinant) learns ``location_``,
    ``precision_`` and ``offset_`` on the complete training rows; a row is an outlier when
    ``(x - location) P (x - location)' > -offset`` (sklearn's ``predict == -1``). The distance is
    computed element-wise per row, never by a batch matrix product. Rows with a missing value are
    not judged.
    """

    kind = "EllipticEnvelope"
    Params = EllipticParams
    exclusion = "outlier"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.covariance import EllipticEnvelope as Sk

        data = float_matrix(frame, params.columns, step=params.name)
        data = data[np.isfinite(data).all(axis=1)]
        if len(data) <= 2 * len(params.columns):
            raise StepError(f"step '{params.name}': only {len(data)} complete training rows for "
                            f"{len(params.columns)} columns; EllipticEnvelope needs more than "
                            f"{2 * len(params.columns)}. Use IQR or ZScore", step=params.name)
        model = Sk(contamination=params.contamination, support_fraction=params.support_fraction,
                   random_state=params.random_state).fit(data)
        return {"location": model.location_.tolist(), "precision": model.precision_.tolist(),
                "threshold": float(-model.offset_)}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        return squared_mahalanobis(float_matrix(frame, state["columns"], step="EllipticEnvelope"),
                                   state) > state["threshold"]

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``flags``: squared Mahalanobis distance to ``location`` under ``precision`` above
        ``threshold`` (the state's arrays built once); ``apply`` changes nothing."""
        columns, threshold = list(state["columns"]), state["threshold"]
        arrays = {"location": np.asarray(state["location"], dtype="float64"),
                  "precision": np.asarray(state["precision"], dtype="float64")}

        def flags(batch: Columns) -> np.ndarray:
            return squared_mahalanobis(batch.float_matrix(columns, step="EllipticEnvelope"), arrays) > threshold

        return Kernel(apply=lambda batch: None, flags=flags)


def squared_mahalanobis(data: np.ndarray, state: dict[str, Any]) -> np.ndarray:
    """``d P d'`` per row with ``d = x - location``: array of shape (n_rows,), NaN rows give -inf.
    ``state["location"]``/``state["precision"]`` may be lists or float64 arrays (a kernel's).

    Element-wise products and sums over a row's own values (no BLAS matrix product, whose
    rounding could depend on the batch shape).
    """
    centred = data - np.asarray(state["location"], dtype="float64")
    precision = np.asarray(state["precision"], dtype="float64")
    projected = (centred[:, :, None] * precision[None, :, :]).sum(axis=1)
    distance = (projected * centred).sum(axis=1)
    return np.where(np.isnan(distance), -np.inf, distance)
