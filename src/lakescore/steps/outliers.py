"""Outlier steps: bounds learned at training; a row outside them is excluded, never dropped."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lakescore.steps.base import StepKind, StepParams, register


class IQRParams(StepParams):
    factor: float = 1.5


@register
class IQR(StepKind):
    """Exclude a row when a value lies outside ``[q1 - factor*iqr, q3 + factor*iqr]``.

    Quartiles are learned on the training rows (missing values ignored; a missing value is never
    an outlier). The rule is Tukey's fences, factor 1.5 by default.
    """

    kind = "IQR"
    Params = IQRParams
    exclusion = "outlier"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        data = frame[params.columns].astype("float64").to_numpy()
        q1, q3 = np.nanpercentile(data, [25, 75], axis=0)
        iqr = q3 - q1
        return {"low": (q1 - params.factor * iqr).tolist(), "high": (q3 + params.factor * iqr).tolist()}

    @staticmethod
    def flags(frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
        data = frame[state["columns"]].astype("float64").to_numpy()
        with np.errstate(invalid="ignore"):
            outside = (data < np.asarray(state["low"])) | (data > np.asarray(state["high"]))
        return outside.any(axis=1)
