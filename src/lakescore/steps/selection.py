"""VarianceThreshold: drop the columns whose training variance is at or below a threshold."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import Field

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register


class VarianceParams(StepParams):
    threshold: float = Field(default=0.0, ge=0)


@register
class VarianceThreshold(StepKind):
    """Keep the columns whose training variance is above ``threshold`` (sklearn
    ``VarianceThreshold``, missing values ignored); the others are dropped from every frame.

    Which columns go is decided once at training and saved, so it never depends on a batch.
    """

    kind = "VarianceThreshold"
    Params = VarianceParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.feature_selection import VarianceThreshold as Sk

        data = float_matrix(frame, params.columns, step=params.name)
        try:
            support = Sk(threshold=params.threshold).fit(data).get_support()
        except ValueError as err:  # sklearn: no feature meets the threshold
            raise StepError(f"step '{params.name}': no column of {params.columns} has training variance "
                            f"above {params.threshold}; lower the threshold or drop the step",
                            step=params.name) from err
        return {"kept": [c for c, k in zip(params.columns, support) if k],
                "dropped": [c for c, k in zip(params.columns, support) if not k]}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return frame.drop(columns=state["dropped"])

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Drop the columns ``state["dropped"]`` from the batch."""
        dropped = list(state["dropped"])

        def apply(batch: Columns) -> None:
            batch.drop(dropped)

        return Kernel(apply)
