"""KBinsDiscretizer: bin edges learned by scikit-learn, bins found per value by a sorted search."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_values, register


class KBinsParams(StepParams):
    n_bins: int = Field(default=5, ge=2, le=1000)
    encode: Literal["ordinal"] = "ordinal"
    strategy: Literal["uniform", "quantile", "kmeans"] = "quantile"
    random_state: int = 0


@register
class KBinsDiscretizer(StepKind):
    """Replace each value by its bin number 0.0, 1.0, ... (float64; missing stays NaN).

    Edges come from sklearn ``KBinsDiscretizer`` fitted per column on its non-missing training
    values (bins narrower than 1e-8 are merged by sklearn, so a column may get fewer bins); a
    value's bin is ``searchsorted(inner_edges, x, side="right")``, sklearn's own transform rule.
    Values beyond the training range fall in the first or last bin. Only ``encode: ordinal``:
    one-hot the bins with a later OneHotEncoder if needed.
    """

    kind = "KBinsDiscretizer"
    Params = KBinsParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import KBinsDiscretizer as Sk

        edges = []
        for column in params.columns:
            values = float_values(frame, column, step=params.name)
            values = values[np.isfinite(values)]
            if len(values) < 2:
                raise StepError(f"step '{params.name}': column '{column}' has {len(values)} finite "
                                "training value(s); binning needs at least 2. Drop it from the step",
                                step=params.name, column=column)
            model = Sk(n_bins=params.n_bins, encode="ordinal", strategy=params.strategy,
                       random_state=params.random_state)
            with warnings.catch_warnings():  # narrow bins are merged; the count is kept in state
                warnings.simplefilter("ignore", UserWarning)
                model.fit(values.reshape(-1, 1))
            edges.append(model.bin_edges_[0].tolist())
        return {"edges": edges, "n_bins": [len(e) - 1 for e in edges]}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, edges in zip(state["columns"], state["edges"]):
            frame[column] = _bins(float_values(frame, column, step="KBinsDiscretizer"), _inner(edges))
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column's bin number (float64, NaN stays NaN) by a sorted search of its inner edges
        from ``state["edges"]`` (float64 arrays built once)."""
        inner = [(column, _inner(edges)) for column, edges in zip(state["columns"], state["edges"])]

        def apply(batch: Columns) -> None:
            for column, edges in inner:
                batch.set(column, _bins(batch.floats(column, step="KBinsDiscretizer"), edges))

        return Kernel(apply)


def _inner(edges: list[float]) -> np.ndarray:
    """The inner bin edges (all but the first and last) as a float64 array."""
    return np.asarray(edges[1:-1], dtype="float64")


def _bins(values: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Bin numbers of ``values`` (n_rows,) as float64: ``searchsorted(inner, x, side="right")``, NaN kept."""
    bins = np.searchsorted(inner, values, side="right")
    return np.where(np.isnan(values), np.nan, bins.astype("float64"))
