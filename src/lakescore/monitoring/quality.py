"""``lakescore monitor``: one quality row per published run in the quality table.

Rates are over all stored outcomes of the run: ``exclusion_rate = excluded / rows``. Performance
(accuracy, ROC AUC) is computed on predicted rows whose label is known, by joining the label table
on the record keys; an excluded row is counted, never read as a prediction of the negative class.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from lakescore.config import ProjectConfig
from lakescore.errors import LakescoreError
from lakescore.frames import derive_label


def quality_metrics(predictions: pd.DataFrame, labels: pd.Series | None) -> dict[str, Any]:
    """Quality figures of one run.

    Parameters
    ----------
    predictions : DataFrame of shape (n_rows, ...)
        The run's published rows (``prediction``, ``probability``, ``scoring_status``).
    labels : Series of shape (n_rows,) or None
        True labels aligned with ``predictions`` (missing where unknown).

    Returns
    -------
    dict with rows, predicted, excluded, exclusion_rate, mean_probability, share_predicted_late,
    labelled_rows, accuracy and roc_auc (NaN when no labelled predicted row exists).
    """
    from sklearn.metrics import accuracy_score, roc_auc_score

    predicted = (predictions["scoring_status"] == "predicted").to_numpy()
    rows = len(predictions)
    out: dict[str, Any] = {
        "rows": rows, "predicted": int(predicted.sum()), "excluded": int(rows - predicted.sum()),
        "exclusion_rate": float((rows - predicted.sum()) / rows) if rows else 0.0,
        "mean_probability": float(predictions.loc[predicted, "probability"].astype("float64").mean())
        if predicted.any() else float("nan"),
        "share_predicted_late": float((predictions.loc[predicted, "prediction"] == 1).mean())
        if predicted.any() else float("nan"),
        "labelled_rows": 0, "accuracy": float("nan"), "roc_auc": float("nan"),
    }
    if labels is not None:
        known = predicted & labels.notna().to_numpy()
        out["labelled_rows"] = int(known.sum())
        if known.any():
            truth = labels[known].astype("int64").to_numpy()
            out["accuracy"] = float(accuracy_score(truth, predictions.loc[known, "prediction"].astype("int64")))
            if len(np.unique(truth)) == 2:
                out["roc_auc"] = float(roc_auc_score(truth, predictions.loc[known, "probability"].astype("float64")))
    return out


@dataclass(frozen=True)
class MonitorResult:
    table: str
    action: str
    row: dict[str, Any]
    report: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"quality_table": self.table, "action": self.action, **self.row,
                **({"report": self.report} if self.report else {})}


def monitor_project(project: ProjectConfig, runtime: Any, *, report: str | None = None) -> MonitorResult:
    """Append the quality row of the latest published run (once per run).

    Raises
    ------
    LakescoreError
        When nothing has been published yet.
    """
    from lakescore.publish.delta_rs import receipts

    inf, mon = project.inference, project.monitoring
    keys = list(project.training.data.record_keys)
    found = receipts(str(runtime.table_path(inf.prediction_table))) if runtime.table_exists(inf.prediction_table) else []
    if not found:
        raise LakescoreError(f"nothing is published in {inf.prediction_table} yet; run `lakescore score --publish`")
    receipt = found[0]
    if runtime.table_exists(mon.quality_table):
        done = runtime.read_table(mon.quality_table, columns=["run_id"])["run_id"]
        if (done == receipt["run_id"]).any():
            row = runtime.read_table(mon.quality_table).query("run_id == @receipt['run_id']").iloc[0].to_dict()
            return MonitorResult(mon.quality_table, "noop: run already monitored", row)
    table = runtime.delta_table(inf.prediction_table)
    predictions = table.to_pandas(filters=[("run_id", "=", receipt["run_id"])])
    labels = None
    if mon.label_table and mon.label_column:
        source = runtime.read_table(mon.label_table)
        label = derive_label(source, column=mon.label_column, expression=mon.label_expression)
        joined = predictions[keys].merge(source[keys].assign(_label=label.to_numpy()), on=keys, how="left")
        labels = joined["_label"]
    row = {"run_id": receipt["run_id"], "model_name": receipt["model_name"],
           "model_version": int(receipt["model_version"]), "source_table": receipt["source_table"],
           "source_version": int(receipt["source_version"]),
           **quality_metrics(predictions, labels),
           "monitored_at": datetime.now(timezone.utc)}
    row["alert"] = bool(row["exclusion_rate"] > mon.max_exclusion_rate)
    runtime.write_table(mon.quality_table, pd.DataFrame([row]), mode="append")
    return MonitorResult(mon.quality_table, "appended", row)
