"""Quality rows: one per (published run, model version) in the quality table, and a further row
each time the run's labels change (:mod:`lakescore.monitoring.labels`).

Rates are over all stored outcomes of the run: ``exclusion_rate = excluded / rows`` and
``invalid_exclusion_rate`` = rows excluded with an ``invalid:<step>`` reason / rows. Null shares
and drift read the run's input rows back from the source at the version the run pinned (joined on
the record keys); drift is the PSI against the bins saved at training
(:mod:`lakescore.monitoring.drift`). Performance is on scored rows only
(:mod:`lakescore.monitoring.performance`). Thresholds in config/monitoring.yml mark a row
``alert`` with its reasons.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from lakescore.config import MonitoringConfig
from lakescore.monitoring.aggregates import NA_TEXT, Distribution, RunAggregates, pandas_aggregates
from lakescore.monitoring.drift import drift_from_counts
from lakescore.monitoring.labels import PERFORMANCE_COLUMNS, LabelSnapshot, digest, labels_changed
from lakescore.monitoring.outputs import SET_NOT_MONITORED
from lakescore.monitoring.performance import performance_figures

JSON_TEXT_COLUMNS = frozenset({"exclusions_by_reason", "null_share", "prediction_distribution", "psi",
                               "output_distribution", "not_monitored", "alert_reasons"})
"""Quality-table columns that hold JSON text (a mapping or a list, kept as one string column in
Delta); a reader that prints a row parses them back (:func:`lakescore.display.json_ready`)."""


def _share(part: int, whole: int) -> float:
    return float(part / whole) if whole else 0.0


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def prediction_distribution(aggregates: RunAggregates | Distribution) -> dict[str, Any]:
    """Class shares (or value quantiles) of the predicted rows, and probability quantiles.

    Integer classes read back as float are written as integers (``1``, not ``1.0``).
    """
    out: dict[str, Any] = {}
    if aggregates.classes is not None:
        classes = aggregates.classes
        if classes and all(isinstance(k, float) and k == round(k) for k in classes):
            classes = {int(k): v for k, v in classes.items()}
        counts: dict[str, int] = {}
        for value, n in classes.items():
            counts[str(value)] = counts.get(str(value), 0) + n
        total = sum(counts.values())
        out["classes"] = {k: counts[k] / total for k in sorted(counts)}
    if aggregates.quantiles:
        out[f"{aggregates.value_column}_quantiles"] = dict(aggregates.quantiles)
    return out


def quality_row(predictions: pd.DataFrame, *, inputs: pd.DataFrame | None = None,
                labels: pd.Series | None = None, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """Quality figures of one run and model version, computed with pandas.

    Parameters
    ----------
    predictions : DataFrame of shape (n_rows, ...)
        The run's stored outcomes (``prediction``, ``probability``, ``scoring_status``,
        ``exclusion_reason``).
    inputs : DataFrame of shape (n_rows, n_inputs) or None
        The model's input columns of the same rows (any order), for null shares and drift.
    labels : Series of shape (n_rows,) or None
        True outcomes aligned with ``predictions`` by position.
    profile : dict or None
        The training drift profile (:func:`lakescore.monitoring.drift.training_profile`).

    Returns
    -------
    dict
        As :func:`figures` of the pandas aggregates.
    """
    return figures(pandas_aggregates(predictions, inputs=inputs, labels=labels, profile=profile), profile)


def figures(aggregates: RunAggregates, profile: dict[str, Any] | None) -> dict[str, Any]:
    """Quality figures from the aggregates of one run and model version (either engine).

    Parameters
    ----------
    aggregates : RunAggregates
        From :func:`~lakescore.monitoring.aggregates.pandas_aggregates` or
        :func:`~lakescore.monitoring.spark_aggregates.spark_aggregates`.
    profile : dict or None
        The training drift profile whose bins ``aggregates.bins`` counted.

    Returns
    -------
    dict
        rows, predicted, excluded, exclusion_rate, invalid_exclusion_rate, exclusions_by_reason,
        null_share, prediction_distribution, mean_probability, psi (JSON texts for the mappings),
        max_feature_psi, prediction_psi, and the performance figures
        (:func:`~lakescore.monitoring.performance.performance_figures`); for a model set also
        :func:`set_figures` (its ``prediction_distribution`` is empty, ``mean_probability`` NaN).
    """
    rows = aggregates.rows
    predicted = sum(n for (status, _), n in aggregates.outcomes.items() if status == "predicted")
    by_reason: dict[str, int] = {}
    for (status, reason), n in aggregates.outcomes.items():
        if status == "excluded":
            by_reason[NA_TEXT if reason is None else reason] = by_reason.get(NA_TEXT if reason is None else reason, 0) + n
    psi = drift_from_counts(profile, aggregates.bins) if profile else {}
    features = [v for k, v in psi.items() if k != "prediction" and not math.isnan(v)]
    nulls = {c: n / rows for c, n in aggregates.null_counts.items()} if aggregates.null_counts is not None and rows else {}
    probability = aggregates.value_column == "probability" and aggregates.value_count
    return {
        "rows": rows, "predicted": predicted, "excluded": rows - predicted,
        "exclusion_rate": _share(rows - predicted, rows),
        "invalid_exclusion_rate": _share(sum(n for r, n in by_reason.items() if r.startswith("invalid:")), rows),
        "exclusions_by_reason": json.dumps(by_reason, sort_keys=True),
        "null_share": json.dumps(nulls, sort_keys=True),
        "prediction_distribution": json.dumps(prediction_distribution(aggregates), sort_keys=True),
        "mean_probability": aggregates.value_sum / aggregates.value_count if probability else float("nan"),
        "psi": json.dumps({k: _nan_to_none(v) for k, v in psi.items()}, sort_keys=True),
        "max_feature_psi": float(max(features)) if features else float("nan"),
        "prediction_psi": float(psi.get("prediction", float("nan"))),
        **performance_figures(aggregates.performance),
        **(set_figures(aggregates) if aggregates.outputs else {}),
    }


def set_figures(aggregates: RunAggregates) -> dict[str, Any]:
    """A model set's figures per output (:mod:`lakescore.monitoring.outputs`), as JSON texts.

    Returns
    -------
    dict
        ``output_distribution``: output name -> :func:`prediction_distribution` of its predicted
        rows, with ``mean_probability`` for a classifier component; ``not_monitored``: the list of
        what a set's row does not measure (:data:`~lakescore.monitoring.outputs.SET_NOT_MONITORED`).
    """
    per = {}
    for name, dist in aggregates.outputs.items():
        mean = {"mean_probability": dist.value_sum / dist.value_count} \
            if dist.value_column == "probability" and dist.value_count else {}
        per[name] = {**prediction_distribution(dist), **mean}
    return {"output_distribution": json.dumps(per, sort_keys=True),
            "not_monitored": json.dumps([SET_NOT_MONITORED])}


def alerts(row: dict[str, Any], monitoring: MonitoringConfig) -> list[str]:
    """Reasons a quality row passes a threshold of config/monitoring.yml.

    Parameters
    ----------
    row : dict
        A :func:`quality_row` (``exclusion_rate``, ``invalid_exclusion_rate``, ``psi`` JSON).
    monitoring : MonitoringConfig
        ``max_exclusion_rate``, ``max_invalid_exclusion_rate`` and ``max_psi`` (a value equal to
        its threshold does not alert).

    Returns
    -------
    list of str
        One reason per threshold passed, e.g. ``psi[month] 8.1984 > max_psi 0.25``; empty: no alert.
    """
    out = []
    if row["exclusion_rate"] > monitoring.max_exclusion_rate:
        out.append(f"exclusion_rate {row['exclusion_rate']:.4f} > max_exclusion_rate {monitoring.max_exclusion_rate}")
    if row["invalid_exclusion_rate"] > monitoring.max_invalid_exclusion_rate:
        out.append(f"invalid_exclusion_rate {row['invalid_exclusion_rate']:.4f} > max_invalid_exclusion_rate "
                   f"{monitoring.max_invalid_exclusion_rate}")
    for column, value in sorted(json.loads(row["psi"]).items()):
        if value is not None and value > monitoring.max_psi:
            out.append(f"psi[{column}] {value:.4f} > max_psi {monitoring.max_psi}")
    return out


def model_rows(frame: pd.DataFrame, version: Any) -> tuple[np.ndarray, pd.DataFrame]:
    """The mask of ``frame``'s rows scored by model ``version``, and those rows (index reset)."""
    mask = (frame["model_version"] == version).to_numpy(dtype=bool) if len(frame) else np.ones(0, bool)
    return mask, frame[mask].reset_index(drop=True)


def model_versions(frame: pd.DataFrame, receipt: dict[str, Any]) -> list[Any]:
    """Model versions among a run's rows, ascending (the receipt's when the run has no rows)."""
    return sorted(frame["model_version"].dropna().unique().tolist()) or [receipt["model_version"]]


def first_row(receipt: dict[str, Any], version: int, aggregates: RunAggregates, *, profile: dict[str, Any] | None,
              label_version: int | None, monitoring: MonitoringConfig) -> dict[str, Any]:
    """The first quality row of one published run and model version, with its alerts.

    Parameters
    ----------
    receipt : dict
        The run's publish receipt (run id, table and source versions, model name, mode).
    version : int
        The model version whose rows ``aggregates`` summarise.
    aggregates : RunAggregates
        Of the run's stored rows scored by that version, with inputs, profile bins, labels and
        the label hash (either engine).
    profile : dict or None
        The training drift profile.
    label_version : int or None
        The label table version the labels were read at.
    monitoring : MonitoringConfig
        The alert thresholds.
    """
    row = {"run_id": receipt["run_id"], "table_version": int(receipt["table_version"]),
           "model_name": receipt["model_name"], "model_version": int(version),
           "source_table": receipt["source_table"], "source_version_from": receipt.get("source_version_from"),
           "source_version_to": int(receipt["source_version_to"]), "mode": receipt.get("mode"),
           **figures(aggregates, profile),
           "label_table_version": label_version, "labels_digest": digest(aggregates.label_hash),
           "measurement": "first", "monitored_at": datetime.now(UTC)}
    reasons = alerts(row, monitoring)
    row["alert"], row["alert_reasons"] = bool(reasons), json.dumps(reasons)
    return row


def remeasure(latest: pd.DataFrame, measured: dict[int, RunAggregates], label_version: int | None) -> list[dict[str, Any]]:
    """New quality rows of one run whose labels changed since its latest rows were measured.

    Parameters
    ----------
    latest : DataFrame
        The run's latest quality row per model version (:func:`latest_measurements`).
    measured : dict of int to RunAggregates
        Per model version, the aggregates of the run's rows on the labels now (performance
        counts and label hash are read).
    label_version : int or None
        The label table's current version.

    Returns
    -------
    list of dict
        Per model version whose labels changed: its latest row with the performance recomputed,
        ``label_table_version``, ``labels_digest``, ``measurement = "labels_changed"`` and
        ``monitored_at`` now; empty when no label of the run changed.
    """
    out = []
    for previous in latest.to_dict("records"):
        aggregates = measured[int(previous["model_version"])]
        recomputed = performance_figures(aggregates.performance)
        now = digest(aggregates.label_hash)
        if labels_changed(previous, now, recomputed):
            out.append({**{k: v for k, v in previous.items() if k not in PERFORMANCE_COLUMNS}, **recomputed,
                        "label_table_version": label_version, "labels_digest": now,
                        "measurement": "labels_changed", "monitored_at": datetime.now(UTC)})
    return out


def stale(latest: pd.DataFrame, snapshot: LabelSnapshot) -> pd.DataFrame:
    """Latest rows measured on an older label table version (or before versions were recorded)."""
    if snapshot.version is None or latest.empty:
        return latest.iloc[0:0]
    measured = latest["label_table_version"].astype("Int64")
    return latest[(measured.isna() | (measured < snapshot.version)).to_numpy(dtype=bool)]
