"""Performance once labels arrive: metrics on scored rows only.

A row with ``scoring_status = excluded`` has no prediction. It is counted (``labelled_excluded``)
but never read as a prediction of zero or of the negative class, so an exclusion can neither
raise nor lower accuracy.

The metrics are a pure function of :class:`~lakescore.monitoring.aggregates.PerformanceCounts`
(:func:`performance_figures`), which the pandas or the Spark engine computes where the rows are:
accuracy = correct / labelled rows; log loss = the mean of -ln p(true class) with p clipped to
[eps, 1 - eps] (scikit-learn's definition); ROC AUC = P(score of a positive > score of a
negative) + P(tie) / 2 from the positives and negatives per distinct probability (exact; the
Spark engine buckets probabilities to 1e-5 wide bins past 100,000 distinct values, counting pairs
in one bucket as ties); RMSE and MAE from the sums of squared and absolute errors.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from lakescore.monitoring.aggregates import PerformanceCounts, performance_counts


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
    return performance_figures(performance_counts(predictions, labels))


def roc_auc(roc: tuple[tuple[float, int, int], ...] | list[tuple[float, int, int]]) -> float:
    """ROC AUC from (score, positives, negatives) per distinct score or bucket, in any order.

    Exact rational arithmetic on the counts, one rounding at the end:
    ``sum_b pos_b * (2 * neg_below_b + neg_b) / (2 * P * N)`` (a tie counts one half, as the
    trapezoid under scikit-learn's ``roc_curve`` does). NaN without both classes.
    """
    twice, below, positives, negatives = 0, 0, 0, 0
    for _, pos, neg in sorted(roc):
        twice += pos * (2 * below + neg)
        below += neg
        positives, negatives = positives + pos, negatives + neg
    return twice / (2 * positives * negatives) if positives and negatives else float("nan")


def performance_figures(counts: PerformanceCounts) -> dict[str, Any]:
    """The metrics of :func:`performance` from :class:`PerformanceCounts` (any engine)."""
    names = ("accuracy", "roc_auc", "log_loss") if counts.classifier else ("rmse", "mae")
    out: dict[str, Any] = {"labelled_rows": counts.labelled_rows, "labelled_excluded": counts.labelled_excluded,
                           **{n: float("nan") for n in names}}
    n = counts.labelled_rows
    if not n:
        return out
    if not counts.classifier:
        out["rmse"] = math.sqrt(counts.squared_error_sum / n)
        out["mae"] = counts.absolute_error_sum / n
        return out
    out["accuracy"] = counts.correct / n
    if counts.positives and counts.negatives and not counts.other_labels:
        out["roc_auc"] = float(roc_auc(counts.roc))
        out["log_loss"] = counts.log_loss_sum / n
    return out
