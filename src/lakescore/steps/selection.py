"""Selection steps: which columns stay is decided once at training and saved; scoring drops the rest.

VarianceThreshold (training variance), CorrelationThreshold (pairwise correlation),
UnivariateSelection (sklearn ``SelectKBest``) and ModelBasedSelection (sklearn ``SelectFromModel``).
Every one saves ``kept`` and ``dropped`` and applies the same way: the ``dropped`` columns leave
the frame. None of them ever selects per batch.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lakescore.columns import Columns, Kernel
from lakescore.errors import StepError
from lakescore.steps.base import StepKind, StepParams, float_matrix, register


class ColumnSelection(StepKind):
    """A selection step (here, and DropMissingColumns in cleaning.py): ``learn`` gives the kept columns, ``apply`` drops ``state["dropped"]``."""

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


def _chosen(columns: list[str], support: Any) -> dict[str, Any]:
    """The state of a selection: ``kept`` and ``dropped`` column names, in the step's column order."""
    return {"kept": [c for c, k in zip(columns, support) if k],
            "dropped": [c for c, k in zip(columns, support) if not k]}


class VarianceParams(StepParams):
    threshold: float = Field(default=0.0, ge=0)


@register
class VarianceThreshold(ColumnSelection):
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
        return _chosen(params.columns, support)


class CorrelationParams(StepParams):
    threshold: float = Field(default=0.95, gt=0, le=1)
    method: Literal["pearson", "spearman"] = "pearson"


@register
class CorrelationThreshold(ColumnSelection):
    """Drop one column of each pair whose training correlation is above ``threshold`` in absolute
    value (``method`` pearson or spearman, pandas ``DataFrame.corr``: each pair over the rows where
    both are present; an undefined correlation, e.g. of a constant column, counts as none).

    Columns are taken in the step's order: a column is kept unless it is too correlated with a
    column kept before it, so of a correlated pair the one listed first stays.
    """

    kind = "CorrelationThreshold"
    Params = CorrelationParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        data = pd.DataFrame(float_matrix(frame, params.columns, step=params.name))
        corr = np.abs(data.corr(method=params.method).to_numpy())
        kept: list[int] = []
        for j in range(len(params.columns)):
            if not any(corr[i, j] > params.threshold for i in kept):  # NaN > t is False
                kept.append(j)
        state = _chosen(params.columns, [j in kept for j in range(len(params.columns))])
        state["threshold"] = params.threshold
        return state


def _complete_rows(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> tuple[np.ndarray, np.ndarray]:
    """The training rows with every column and the label present: (matrix (n, n_columns), label (n,)).

    Raises
    ------
    StepError
        No label, or fewer than 2 complete rows.
    """
    if y is None or len(y) != len(frame):
        raise StepError(f"step '{params.name}' ({params.step}) needs the label at training; it cannot run in the "
                        "pre-split recipe or without a label", step=params.name)
    data = float_matrix(frame, params.columns, step=params.name)
    target = np.asarray(y)
    complete = ~np.isnan(data).any(axis=1) & pd.notna(target)
    if complete.sum() < 2:
        raise StepError(f"step '{params.name}' ({params.step}): {int(complete.sum())} training row(s) have every "
                        f"column of {params.columns} and the label; it scores columns on complete rows only. "
                        "Impute the columns first (SimpleImputer)", step=params.name)
    return data[complete], target[complete]


def _too_many(params: Any, key: str, value: int) -> None:
    if value > len(params.columns):
        raise StepError(f"step '{params.name}' ({params.step}): {key}: {value} is more than its "
                        f"{len(params.columns)} columns; lower {key} or list more columns", step=params.name)


class UnivariateParams(StepParams):
    score: Literal["f_classif", "f_regression", "mutual_info_classif", "mutual_info_regression"] = "f_classif"
    k: int = Field(default=10, ge=1)
    random_state: int = 0


@register
class UnivariateSelection(ColumnSelection):
    """Keep the ``k`` columns that score best against the label, one at a time (sklearn
    ``SelectKBest`` with ``score``: ``f_classif``, ``f_regression``, ``mutual_info_classif`` or
    ``mutual_info_regression``, the last two seeded by ``random_state``), scored on the training
    rows where every column and the label are present. Ties go as sklearn breaks them (a stable
    sort of the scores). The scores are saved with the kept list.
    """

    kind = "UnivariateSelection"
    Params = UnivariateParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from functools import partial

        from sklearn import feature_selection as fs

        _too_many(params, "k", params.k)
        data, target = _complete_rows(frame, y, params)
        score = getattr(fs, params.score)
        if params.score.startswith("mutual_info"):
            score = partial(score, random_state=params.random_state)
        with np.errstate(divide="ignore", invalid="ignore"):  # a constant column scores NaN: never kept first
            selector = fs.SelectKBest(score, k=params.k).fit(data, target)
        state = _chosen(params.columns, selector.get_support())
        state["scores"] = [float(s) for s in selector.scores_]
        return state


class ModelBasedParams(StepParams):
    estimator: str = "RandomForestClassifier"
    estimator_params: dict[str, Any] = Field(default_factory=dict)
    threshold: float | str = "mean"
    max_features: int | None = Field(default=None, ge=1)
    random_state: int = 0


@register
class ModelBasedSelection(ColumnSelection):
    """Keep the columns a declared model finds important (sklearn ``SelectFromModel``): the model
    ``estimator`` (a model class name of lakescore's models, e.g. RandomForestClassifier, Lasso,
    LogisticRegression, with ``estimator_params``, seeded by ``random_state``) is fitted once on the
    training rows where every column and the label are present; columns whose importance
    (``feature_importances_`` or ``|coef_|``) is at least ``threshold`` (a number, ``mean``,
    ``median`` or e.g. ``1.25*mean``) stay, at most ``max_features`` of them. The importances are
    saved with the kept list.
    """

    kind = "ModelBasedSelection"
    Params = ModelBasedParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.feature_selection import SelectFromModel

        from lakescore.errors import ConfigError
        from lakescore.models import build_model

        if params.max_features is not None:
            _too_many(params, "max_features", params.max_features)
        try:
            model = build_model(params.estimator, params.estimator_params, random_state=params.random_state)
        except ConfigError as err:
            raise StepError(f"step '{params.name}' (ModelBasedSelection): estimator: {'; '.join(err.problems)}",
                            step=params.name) from err
        data, target = _complete_rows(frame, y, params)
        selector = SelectFromModel(model, threshold=params.threshold, max_features=params.max_features)
        try:
            selector.fit(data, target)
            support = selector.get_support()
        except (ValueError, AttributeError) as err:  # no importances, or a threshold sklearn cannot read
            raise StepError(f"step '{params.name}' (ModelBasedSelection): estimator {params.estimator} with "
                            f"threshold {params.threshold!r} cannot rank columns ({err}); use a model with "
                            "feature_importances_ or coef_ (RandomForestClassifier, Lasso, LogisticRegression) "
                            "and a threshold like 'mean' or 0.01", step=params.name) from err
        raw = getattr(selector.estimator_, "feature_importances_", None)
        raw = selector.estimator_.coef_ if raw is None else raw
        # sklearn's rule: |coef_|, summed over the classes of a multiclass model (its L1 norm)
        importances = np.abs(np.asarray(raw, dtype="float64")).reshape(-1, len(params.columns)).sum(axis=0)
        state = _chosen(params.columns, support)
        state["importances"] = importances.tolist()
        if not state["kept"]:
            raise StepError(f"step '{params.name}' (ModelBasedSelection): no column of {params.columns} reaches "
                            f"threshold {params.threshold!r}; lower the threshold", step=params.name)
        return state
