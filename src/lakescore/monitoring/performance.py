"""Performance once labels arrive: metrics on scored rows only.

A row with ``scoring_status = excluded`` has no prediction. It is counted (``labelled_excluded``)
but never read as a prediction of zero or of the negative class, so an exclusion can neither
raise nor lower accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def performance(predictions: pd.DataFrame, labels: pd.Series | None) -> dict[str, Any]:
    """Accuracy, ROC AUC and log loss (classification: a ``probability`` column) or RMSE and MAE
    (regression), on predicted rows whose label is known.

    Parameters
    ----------
    predictions : DataFrame of shape (n_rows, ...)
        ``scoring_status``, ``prediction`` and, for a classifier, ``probability`` of the positive
        class.
    labels : Series of shape (n_rows,) or None
        True outcomes aligned with ``predictions`` by position, missing where not known yet.

    Returns
    -------
    dict
        ``labelled_rows`` (predicted and labelled), ``labelled_excluded`` (excluded and labelled),
        and the metrics (NaN when no labelled predicted row exists; ROC AUC and log loss need
        two label values 0/1).
    """
    from sklearn import metrics

    classifier = "probability" in predictions.columns
    names = ("accuracy", "roc_auc", "log_loss") if classifier else ("rmse", "mae")
    out: dict[str, Any] = {"labelled_rows": 0, "labelled_excluded": 0, **{n: float("nan") for n in names}}
    if labels is None:
        return out
    labels = pd.Series(labels).reset_index(drop=True)
    predicted = (predictions["scoring_status"] == "predicted").to_numpy()
    known = labels.notna().to_numpy()
    out["labelled_excluded"] = int((~predicted & known).sum())
    use = predicted & known
    out["labelled_rows"] = int(use.sum())
    if not use.any():
        return out
    truth = labels[use].to_numpy()
    scored = predictions.reset_index(drop=True)[use]
    if not classifier:
        guess = scored["prediction"].to_numpy(dtype="float64")
        out["rmse"] = float(np.sqrt(metrics.mean_squared_error(truth.astype("float64"), guess)))
        out["mae"] = float(metrics.mean_absolute_error(truth.astype("float64"), guess))
        return out
    guess = scored["prediction"].to_numpy()
    if pd.api.types.is_numeric_dtype(labels.dtype) and pd.api.types.is_numeric_dtype(scored["prediction"].dtype):
        out["accuracy"] = float(np.mean(truth.astype("float64") == guess.astype("float64")))
    else:  # text classes: compare as text
        out["accuracy"] = float(np.mean([str(a) == str(b) for a, b in zip(truth, guess)]))
    values = set(pd.unique(truth).tolist())
    if values <= {0, 1} and len(values) == 2:
        prob = scored["probability"].to_numpy(dtype="float64")
        out["roc_auc"] = float(metrics.roc_auc_score(truth.astype("int64"), prob))
        out["log_loss"] = float(metrics.log_loss(truth.astype("int64"), prob, labels=[0, 1]))
    return out
