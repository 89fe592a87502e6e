"""Scaling steps. scikit-learn learns the statistics; apply is element-wise arithmetic."""

from __future__ import annotations

from typing import Any

import pandas as pd

from lakescore.steps.base import StepKind, StepParams, register


@register
class StandardScaler(StepKind):
    """``(x - mean) / scale`` per column, mean and scale from sklearn ``StandardScaler``."""

    kind = "StandardScaler"

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: StepParams) -> dict[str, Any]:
        from sklearn.preprocessing import StandardScaler as Sk

        scaler = Sk().fit(frame[params.columns].astype("float64"))
        return {"mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist()}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, mean, scale in zip(state["columns"], state["mean"], state["scale"]):
            frame[column] = (frame[column].astype("float64") - mean) / scale
        return frame
