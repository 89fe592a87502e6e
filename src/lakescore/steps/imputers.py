"""Imputation steps. scikit-learn learns the fill values; apply reads them from state."""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd

from lakescore.steps.base import StepKind, StepParams, register


class SimpleImputerParams(StepParams):
    strategy: Literal["mean", "median", "most_frequent", "constant"] = "mean"
    fill_value: float | str | None = None


@register
class SimpleImputer(StepKind):
    """Fill missing values with one learned value per column (sklearn ``SimpleImputer``)."""

    kind = "SimpleImputer"
    Params = SimpleImputerParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.impute import SimpleImputer as Sk

        data = frame[params.columns]
        if params.strategy in ("mean", "median"):
            data = data.astype("float64")
        else:
            data = data.astype(object).where(data.notna(), None)
        imputer = Sk(strategy=params.strategy, fill_value=params.fill_value,
                     missing_values=None if params.strategy not in ("mean", "median") else float("nan"))
        imputer.fit(data)
        return {"fill": [v.item() if hasattr(v, "item") else v for v in imputer.statistics_]}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, value in zip(state["columns"], state["fill"]):
            frame[column] = frame[column].fillna(value)
        return frame
