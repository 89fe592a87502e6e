"""Model-based imputation: KNNImputer and IterativeImputer, reproduced row by row from state.

scikit-learn fits both. Their ``transform`` is not safe to call per batch as it is: KNN distances
come from a batch matrix product, and ``IterativeImputer.transform`` skips its rounds when every
value of the batch is missing. So ``apply`` recomputes sklearn's fitted imputation for each row
from the saved state with element-wise numpy, and a row is filled the same way in any batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register

CHUNK_ROWS = 256


def _no_empty_columns(step: str, data: np.ndarray, columns: list[str]) -> None:
    empty = [c for c, col in zip(columns, data.T) if np.isnan(col).all()]
    if empty:
        raise StepError(f"step '{step}': column(s) {empty} have no value in the training rows; drop "
                        "them from the step", step=step)


def _write(frame: pd.DataFrame, columns: list[str], data: np.ndarray) -> pd.DataFrame:
    for i, column in enumerate(columns):
        frame[column] = data[:, i]
    return frame


def _matrix_kernel(columns: list[str], kind: str, fill: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """A kernel that reads ``columns`` as one float64 matrix (n_rows, n_columns), fills it with
    ``fill`` (the same function ``apply`` runs) and sets each column back as float64."""

    def apply(batch: Columns) -> None:
        data = np.asfortranarray(fill(batch.float_matrix(columns, step=kind)))
        for i, column in enumerate(columns):
            batch.set(column, data[:, i])

    return Kernel(apply)


class KNNParams(StepParams):
    n_neighbors: int = Field(default=5, ge=1, le=100)
    weights: Literal["uniform", "distance"] = "uniform"
    max_reference_rows: int = Field(default=2000, ge=1, le=50000)
    random_state: int = 0


@register
class KNNImputer(StepKind):
    """Fill a missing value with the mean of that column over the row's ``n_neighbors`` nearest
    training rows (sklearn ``KNNImputer``: nan-Euclidean distance, donors are reference rows with
    the column present, ``uniform`` or ``distance`` weights; a row with no usable distance gets the
    column mean).

    The reference rows are the training rows, at most ``max_reference_rows`` of them (a fixed
    random sample, ``random_state``, kept in training order), saved in state.

    Tie rule: donors at exactly the same distance from a row are ranked by their position in the
    saved reference set, the earlier first (a stable sort of the row's distances to the fixed
    reference rows). So when the k-th and (k+1)-th nearest donors are equally far, the earlier
    reference row is a neighbour and the later one is not. The rule reads only the row and the
    state, never the batch's order or size; sklearn leaves that order unspecified (argpartition),
    so a row with such a tie may differ from sklearn's ``transform``.
    """

    kind = "KNNImputer"
    Params = KNNParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.impute import KNNImputer as Sk

        data = float_matrix(frame, params.columns, step=params.name)
        _no_empty_columns(params.name, data, params.columns)
        if len(data) > params.max_reference_rows:
            keep = np.random.default_rng(params.random_state).choice(len(data), params.max_reference_rows,
                                                                     replace=False)
            data = data[np.sort(keep)]
        Sk(n_neighbors=params.n_neighbors, weights=params.weights).fit(data)  # validates; keeps data
        reference = np.ascontiguousarray(data, dtype="float64")
        return {"reference": reference, "col_mean": np.nanmean(reference, axis=0).tolist(),
                "n_neighbors": params.n_neighbors, "weights": params.weights}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="KNNImputer")
        return _write(frame, state["columns"], _knn_impute(data, _reference(state), state))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The columns' float64 matrix filled by the function ``apply`` runs, with the reference rows
        read from state once."""
        reference = _reference(state)
        return _matrix_kernel(state["columns"], "KNNImputer", lambda data: _knn_impute(data, reference, state))


def _reference(state: dict[str, Any]) -> np.ndarray:
    return np.asarray(state["reference"], dtype="float64")


def _knn_impute(data: np.ndarray, reference: np.ndarray, state: dict[str, Any]) -> np.ndarray:
    """Fill, in place, the missing values of ``data`` (n_rows, n_columns; a matrix of the caller's
    own), CHUNK_ROWS rows with a missing value at a time; returns ``data``."""
    todo = np.flatnonzero(np.isnan(data).any(axis=1))
    for start in range(0, len(todo), CHUNK_ROWS):
        rows = todo[start:start + CHUNK_ROWS]
        data[rows] = _knn_fill(data[rows], reference, state)
    return data


def nan_euclidean(rows: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """sklearn's nan-Euclidean distance, element-wise: array of shape (n_rows, n_reference).

    ``sqrt(n_features / n_present * sum over present coordinates of (x - r)^2)``; NaN when the two
    rows share no present coordinate.
    """
    diff = rows[:, None, :] - reference[None, :, :]
    present = ~np.isnan(diff)
    squares = np.where(present, diff * diff, 0.0).sum(axis=2)
    count = present.sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, np.sqrt(squares * (rows.shape[1] / count)), np.nan)


def _donor_mean(dist: np.ndarray, values: np.ndarray, k: int, weights: str) -> float:
    """Weighted mean of the ``k`` nearest donors' values (NaN distances weigh 0; equal distances
    ranked by the donors' order in the reference set: the tie rule of :class:`KNNImputer`)."""
    order = np.argsort(np.where(np.isnan(dist), np.inf, dist), kind="stable")[:k]
    near = dist[order]
    if weights == "distance":
        with np.errstate(divide="ignore"):
            w = 1.0 / near
        w = (near == 0).astype("float64") if (near == 0).any() else w
    else:
        w = np.ones_like(near)
    w = np.where(np.isnan(near), 0.0, w)
    return float((w * values[order]).sum() / w.sum())


def _knn_fill(rows: np.ndarray, reference: np.ndarray, state: dict[str, Any]) -> np.ndarray:
    dist = nan_euclidean(rows, reference)
    out = rows.copy()
    for i, j in zip(*np.nonzero(np.isnan(rows))):
        donors = ~np.isnan(reference[:, j])
        d = dist[i, donors]
        if np.isnan(d).all():
            out[i, j] = state["col_mean"][j]
        else:
            k = min(state["n_neighbors"], int(donors.sum()))
            out[i, j] = _donor_mean(d, reference[donors, j], k, state["weights"])
    return out


class IterativeParams(StepParams):
    max_iter: int = Field(default=10, ge=1, le=100)
    tol: float = Field(default=1e-3, gt=0)
    initial_strategy: Literal["mean", "median", "most_frequent"] = "mean"
    imputation_order: Literal["ascending", "descending", "roman", "arabic"] = "ascending"
    sample_posterior: bool = False
    min_value: float | None = None
    max_value: float | None = None
    random_state: int = 0

    @field_validator("sample_posterior")
    @classmethod
    def _no_sampling(cls, value: bool) -> bool:
        if value:
            raise ValueError("must be false: sampled imputations would differ from batch to batch")
        return value


@register
class IterativeImputer(StepKind):
    """Fill missing values by sklearn ``IterativeImputer`` rounds (BayesianRidge per column).

    Saved: the initial fill values, and for each learned round and column the regression
    ``(column, neighbour columns, coef, intercept)`` with the column's clip range. ``apply`` always
    runs every saved round on every row with a missing value — also in a batch where every value is
    missing, where sklearn's ``transform`` would stop after the initial fill — so a row is filled
    the same way in any batch. ``sample_posterior: true`` is rejected.
    """

    kind = "IterativeImputer"
    Params = IterativeParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.experimental import enable_iterative_imputer  # noqa: F401  (sklearn's opt-in)
        from sklearn.impute import IterativeImputer as Sk

        data = float_matrix(frame, params.columns, step=params.name)
        _no_empty_columns(params.name, data, params.columns)
        low = -np.inf if params.min_value is None else params.min_value
        high = np.inf if params.max_value is None else params.max_value
        model = Sk(max_iter=params.max_iter, tol=params.tol, initial_strategy=params.initial_strategy,
                   imputation_order=params.imputation_order, min_value=low, max_value=high,
                   random_state=params.random_state)
        with warnings.catch_warnings():  # early stopping not reached: the rounds run are saved
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(data)
        rounds = [[int(t.feat_idx), [int(i) for i in t.neighbor_feat_idx],
                   np.asarray(t.estimator.coef_, dtype="float64").tolist(), float(t.estimator.intercept_)]
                  for t in model.imputation_sequence_]
        return {"initial": model.initial_imputer_.statistics_.tolist(), "rounds": rounds,
                "min": [low] * len(params.columns), "max": [high] * len(params.columns)}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        data = float_matrix(frame, state["columns"], step="IterativeImputer")
        return _write(frame, state["columns"], _iterate(data, _Rounds(state)))

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """The columns' float64 matrix filled by the rounds ``apply`` runs, read from state once."""
        rounds = _Rounds(state)
        return _matrix_kernel(state["columns"], "IterativeImputer", lambda data: _iterate(data, rounds))


class _Rounds:
    """An IterativeImputer state as arrays: initial fill values, and per round ``(column, neighbour
    columns, coef, intercept, low, high)``."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.initial = np.asarray(state["initial"], dtype="float64")
        self.rounds = [(column, neighbours, np.asarray(coef, dtype="float64"), intercept,
                        state["min"][column], state["max"][column])
                       for column, neighbours, coef, intercept in state["rounds"]]


def _iterate(data: np.ndarray, rounds: _Rounds) -> np.ndarray:
    """Every saved round on each row of ``data`` (n_rows, n_columns) with a missing value: a new
    filled matrix of the same shape."""
    missing = np.isnan(data)
    filled = np.where(missing, rounds.initial, data)
    for column, neighbours, coef, intercept, low, high in rounds.rounds:
        rows = missing[:, column]
        if not rows.any():
            continue
        terms = filled[np.ix_(rows, neighbours)] * coef
        filled[rows, column] = np.clip(terms.sum(axis=1) + intercept, low, high)
    return filled
