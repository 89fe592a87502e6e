"""Drift: population stability index against bins saved at training.

At training, :func:`training_profile` bins every feature (numeric: decile edges; text: the most
frequent categories, the rest as ``__other__``) and the prediction, each with a ``__missing__``
bin, and records the expected share of each bin. The profile is JSON and is logged with the model
(``drift_profile.json`` in the training run). At monitoring, :func:`bin_shares` puts a run's values
in the same bins and :func:`psi` compares:

    PSI = sum_i (a_i - e_i) * ln(a_i / e_i)

with shares floored at ``1e-4`` so an empty bin counts as rare, not infinitely surprising
(the usual reading: below 0.1 stable, 0.1-0.25 moderate shift, above 0.25 a large shift).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

PROFILE_FORMAT = 1
EPSILON = 1e-4
MISSING, OTHER = "__missing__", "__other__"


def _numeric_bins(values: pd.Series, bins: int) -> dict[str, Any]:
    known = values.dropna().astype("float64")
    edges = sorted(set(np.quantile(known, np.linspace(0, 1, bins + 1)[1:-1]).tolist())) if len(known) else []
    entry = {"kind": "numeric", "edges": [float(e) for e in edges]}
    entry["expected"] = bin_shares(entry, values).tolist()
    return entry


def _categorical_bins(values: pd.Series, max_categories: int) -> dict[str, Any]:
    counts = values.dropna().astype(str).value_counts()
    entry = {"kind": "categorical", "categories": [str(c) for c in counts.index[:max_categories]]}
    entry["expected"] = bin_shares(entry, values).tolist()
    return entry


def bin_labels(entry: dict[str, Any]) -> list[str]:
    """Readable labels of a profile entry's bins, in order (the last is ``__missing__``)."""
    if entry["kind"] == "numeric":
        edges = entry["edges"]
        bounds = ["-inf", *[f"{e:.4g}" for e in edges], "inf"]
        return [f"({bounds[i]}, {bounds[i + 1]}]" for i in range(len(edges) + 1)] + [MISSING]
    return [*entry["categories"], OTHER, MISSING]


def bin_counts(entry: dict[str, Any], values: pd.Series) -> np.ndarray:
    """Count of ``values`` in each bin of ``entry`` (float64, the last bin ``__missing__``).

    Numeric bins are ``(e[i-1], e[i]]`` with open ends (a value's bin is the number of edges
    below it); missing values (None, NaN, pd.NA) go to the last bin. Categorical bins compare
    ``str(value)``; a category not in the profile counts as ``__other__``.
    """
    values = pd.Series(values)
    missing = values.isna().to_numpy()
    if entry["kind"] == "numeric":
        known = values[~missing].astype("float64").to_numpy()
        index = np.searchsorted(np.asarray(entry["edges"], dtype="float64"), known, side="left")
        counts = np.bincount(index, minlength=len(entry["edges"]) + 1).astype("float64")
    else:
        position = {c: i for i, c in enumerate(entry["categories"])}
        other = len(entry["categories"])
        index = np.array([position.get(str(v), other) for v in values[~missing]], dtype="int64")
        counts = np.bincount(index, minlength=other + 1).astype("float64")
    return np.append(counts, float(missing.sum()))


def shares(counts: Any) -> np.ndarray:
    """Counts per bin as shares (sum 1; all zeros when every count is 0)."""
    counts = np.asarray(counts, dtype="float64")
    total = counts.sum()
    return counts / total if total else counts


def bin_shares(entry: dict[str, Any], values: pd.Series) -> np.ndarray:
    """Share of ``values`` in each bin of ``entry`` (sums to 1; all zeros for no values).

    Numeric bins are ``(e[i-1], e[i]]`` with open ends; missing values (None, NaN, pd.NA) go to the
    last bin (:func:`bin_counts`).
    """
    return shares(bin_counts(entry, values))


def psi(expected: Any, actual: Any, *, epsilon: float = EPSILON) -> float:
    """Population stability index of two share vectors over the same bins.

    Parameters
    ----------
    expected, actual : array of shape (n_bins,)
        Shares per bin (each sums to 1), training first.
    epsilon : float, default 1e-4
        Floor applied to both shares before the logarithm.

    Returns
    -------
    float
        ``sum((a - e) * ln(a / e))``; 0 for identical shares, NaN when ``actual`` is empty.
    """
    e = np.maximum(np.asarray(expected, dtype="float64"), epsilon)
    a = np.asarray(actual, dtype="float64")
    if a.sum() == 0:
        return float("nan")
    a = np.maximum(a, epsilon)
    return float(np.sum((a - e) * np.log(a / e)))


def training_profile(frame: pd.DataFrame, *, feature_columns: list[str] | tuple[str, ...],
                     predictions: pd.DataFrame | None = None, bins: int = 10,
                     max_categories: int = 20, prediction_column: str | None = None) -> dict[str, Any]:
    """JSON-able bins and expected shares of the training sample, for PSI at monitoring time.

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, >= len(feature_columns))
        The training rows (raw inputs, before preprocessing).
    feature_columns : list of str
        Columns to profile: numeric ones by quantile edges, others by category.
    predictions : DataFrame or None
        ``FittedChain.predict`` output on training or holdout rows; its predicted rows'
        ``probability`` (classification) or ``prediction`` (regression) is profiled as
        ``prediction``.
    bins : int, default 10
        Quantile bins per numeric column (fewer when values repeat).
    max_categories : int, default 20
        Categories kept per text column; the rest share the ``__other__`` bin.
    prediction_column : str, optional
        The column of ``predictions`` to profile as ``prediction`` (a model set's, e.g.
        ``delay_model_probability``); default ``probability``, else ``prediction``.

    Returns
    -------
    dict
        ``{"format": 1, "rows": n, "features": {column: entry}, "prediction": entry or None}``;
        each entry has ``kind``, ``edges`` or ``categories``, and ``expected`` shares.
    """
    features = {}
    for column in feature_columns:
        values = frame[column]
        numeric = pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype)
        features[column] = _numeric_bins(values, bins) if numeric else _categorical_bins(values, max_categories)
    prediction = None
    if predictions is not None and len(predictions):
        scored = predictions[predictions["scoring_status"] == "predicted"]
        column = prediction_column or ("probability" if "probability" in scored.columns else "prediction")
        if pd.api.types.is_numeric_dtype(scored[column].dtype):
            prediction = {**_numeric_bins(scored[column], bins), "column": column}
    return {"format": PROFILE_FORMAT, "rows": int(len(frame)), "features": features, "prediction": prediction}


def drift(profile: dict[str, Any], frame: pd.DataFrame, predictions: pd.DataFrame | None = None) -> dict[str, float]:
    """PSI of every profiled feature present in ``frame``, and ``prediction`` when profiled.

    Returns
    -------
    dict of str to float
        Column -> PSI (NaN when the run has no values for it).
    """
    return drift_from_counts(profile, profile_counts(profile, frame, predictions))


def profile_counts(profile: dict[str, Any], frame: pd.DataFrame,
                   predictions: pd.DataFrame | None = None) -> dict[str, list[float]]:
    """Counts per bin of every profiled feature present in ``frame`` and, under ``prediction``,
    of the predicted rows' profiled prediction column (the pandas engine of the PSI aggregate)."""
    out = {column: bin_counts(entry, frame[column]).tolist()
           for column, entry in profile.get("features", {}).items() if column in frame.columns}
    entry = profile.get("prediction")
    if entry and predictions is not None:
        scored = predictions[predictions["scoring_status"] == "predicted"]
        if entry["column"] in scored.columns:
            out["prediction"] = bin_counts(entry, scored[entry["column"]]).tolist()
    return out


def drift_from_counts(profile: dict[str, Any], counts: dict[str, Any]) -> dict[str, float]:
    """PSI per column from counts per bin (:func:`profile_counts` or the Spark aggregate).

    Parameters
    ----------
    profile : dict
        The training profile (:func:`training_profile`).
    counts : dict of str to array of shape (n_bins,)
        Column (``prediction`` for the prediction) -> counts in the profile's bins, in order.

    Returns
    -------
    dict of str to float
        Column -> PSI against the profile's expected shares (NaN for a column with no values).
    """
    entries = {**profile.get("features", {}), "prediction": profile.get("prediction")}
    return {column: psi(entries[column]["expected"], shares(values)) for column, values in counts.items()}
