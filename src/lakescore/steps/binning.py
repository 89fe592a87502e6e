"""Binning: KBinsDiscretizer (sklearn's rule), CustomBinning (declared edges) and GeneralBinning
(edges learned by sklearn ``KBinsDiscretizer``, applied as CustomBinning applies declared ones).

Edges are fixed in state before any row is scored; a value's bin is found by a sorted search of
the edges, so it depends on the value alone.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator, model_validator

from lakescore.columns import Columns, Kernel, float_values
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, register


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


Closed = Literal["right", "left"]
Outside = Literal["missing", "clip"]


class _BinningOptions(StepParams):
    closed: Closed = "right"
    labels: list[str] | None = None
    outside: Outside = "missing"

    @field_validator("labels")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"labels repeat a value: {value}; give each bin its own label")
        return value


class CustomBinningParams(_BinningOptions):
    edges: list[float] | dict[str, list[float]]

    @field_validator("edges", mode="before")
    @classmethod
    def _edges_not_a_count(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            raise ValueError(f"must be a list of edges, not a number of bins ({value}): pandas would compute "
                             "equal-width edges from each batch's own values; write the edges "
                             "(e.g. edges: [0, 500, 1000, 5000]) or use GeneralBinning to learn them at training")
        return value

    @model_validator(mode="after")
    def _edges_fit_columns(self) -> CustomBinningParams:
        per_column = self.edges if isinstance(self.edges, dict) else {c: self.edges for c in self.columns}
        unknown = sorted(set(per_column) - set(self.columns))
        missing = [c for c in self.columns if c not in per_column]
        if unknown or missing:
            raise ValueError(f"edges must name exactly the step's columns {self.columns}; "
                             f"extra {unknown}, missing {missing}")
        for column, edges in per_column.items():
            if len(edges) < 2 or any(not b > a for a, b in zip(edges, edges[1:])) or any(np.isnan(edges)):
                raise ValueError(f"edges of {column!r} must be 2 or more strictly increasing numbers; got {edges}")
            if self.labels is not None and len(self.labels) != len(edges) - 1:
                raise ValueError(f"labels has {len(self.labels)} entries but the edges of {column!r} make "
                                 f"{len(edges) - 1} bins; give one label per bin")
        return self


def _binning_state(columns: list[str], edges: list[list[float]], params: Any) -> dict[str, Any]:
    return {"edges": [[float(e) for e in col] for col in edges], "closed": params.closed,
            "labels": None if params.labels is None else list(params.labels), "outside": params.outside}


@register
class CustomBinning(StepKind):
    """Replace each value by its bin among declared ``edges`` (one list for every column, or
    ``{column: [...]}``), as ``pandas.cut`` would with those edges.

    ``closed: right`` makes bins ``(a, b]``, ``left`` makes them ``[a, b)``. The output is the bin
    number 0.0, 1.0, ... (float64), or with ``labels: [...]`` the bin's label (text, object). A
    missing value stays missing (NaN, or None with labels). A value outside the edges (or on the
    open end of the outer bins) is missing with ``outside: missing`` (pandas' rule, the default)
    or falls in the first or last bin with ``outside: clip``. ``edges`` as a number of bins is
    refused: pandas would learn those edges from each batch. Learns nothing (a ``fixed`` step).
    """

    kind = "CustomBinning"
    Params = CustomBinningParams
    fixed = True

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        edges = [params.edges[c] if isinstance(params.edges, dict) else params.edges for c in params.columns]
        return _binning_state(params.columns, edges, params)

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        right = state["closed"] == "right"
        for column, edges in zip(state["columns"], state["edges"]):
            values = float_values(frame, column, step="CustomBinning")
            codes = np.asarray(pd.cut(values, edges, right=right, labels=False), dtype="float64")
            if state["outside"] == "clip":  # a value with no bin: the first bin at or below the edges, else the last
                beyond = np.isnan(codes) & ~np.isnan(values)
                codes[beyond] = np.where(values[beyond] <= edges[0], 0.0, len(edges) - 2.0)
            frame[column] = _labelled(codes, state["labels"])
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Each column's bin by a sorted search of its edges (float64 arrays built once): bin i
        holds ``edges[i] < x <= edges[i+1]`` (``right``) or ``edges[i] <= x < edges[i+1]``; outside
        ones are NaN or clipped into the outer bins; labels looked up by bin number."""
        columns = [(column, np.asarray(edges, dtype="float64")) for column, edges in
                   zip(state["columns"], state["edges"])]
        side = "left" if state["closed"] == "right" else "right"

        def apply(batch: Columns) -> None:
            for column, edges in columns:
                values = batch.floats(column, step="CustomBinning")
                codes = (np.searchsorted(edges, values, side=side) - 1).astype("float64")  # type: ignore[call-overload]  # side is 'left' or 'right'
                last = len(edges) - 2
                if state["outside"] == "clip":
                    codes = np.clip(codes, 0, last)
                else:
                    codes[(codes < 0) | (codes > last)] = np.nan
                codes[np.isnan(values)] = np.nan
                batch.set(column, _labelled(codes, state["labels"]))

        return Kernel(apply)


def _labelled(codes: np.ndarray, labels: list[str] | None) -> np.ndarray:
    """Bin numbers (float64, NaN: no bin) as they are, or as their labels (object, None: no bin)."""
    if labels is None:
        return codes
    table = np.array([*labels, None], dtype=object)
    return table[np.where(np.isnan(codes), len(labels), codes).astype(np.intp)]


class GeneralBinningParams(_BinningOptions):
    n_bins: int = Field(default=5, ge=2, le=1000)
    strategy: Literal["uniform", "quantile", "kmeans"] = "quantile"
    random_state: int = 0
    outside: Outside = "clip"


@register
class GeneralBinning(StepKind):
    """Bins of edges learned at training: ``strategy`` uniform (equal width), quantile (equal
    counts) or kmeans, by sklearn ``KBinsDiscretizer`` per column on its finite training values
    (narrow bins are merged by sklearn, so a column may get fewer than ``n_bins``; with ``labels``
    that is an error at training). The edges are then applied as :class:`CustomBinning` applies
    declared ones (``closed``, ``labels``, ``outside``), with ``outside: clip`` by default: a value
    beyond the training range falls in the first or last bin.
    """

    kind = "GeneralBinning"
    Params = GeneralBinningParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        edges = KBinsDiscretizer.learn(frame, y, params)["edges"]
        for column, col_edges in zip(params.columns, edges):
            if params.labels is not None and len(params.labels) != len(col_edges) - 1:
                raise StepError(f"step '{params.name}': column '{column}' got {len(col_edges) - 1} bins at training "
                                f"(sklearn merged narrow ones), but labels has {len(params.labels)}; give "
                                f"{len(col_edges) - 1} labels or lower n_bins", step=params.name, column=column)
        return _binning_state(params.columns, edges, params)

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return CustomBinning.apply(frame, state)

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """CustomBinning's kernel over the learned edges."""
        return CustomBinning.kernel(state)
