"""``lakescore monitor``: a quality row per (published run, model version) in the quality table,
and a further row each time the run's labels change (:mod:`lakescore.monitoring.labels`).

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
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from lakescore.config import MonitoringConfig, ProjectConfig
from lakescore.errors import LakescoreError
from lakescore.monitoring.drift import drift
from lakescore.monitoring.labels import (PERFORMANCE_COLUMNS, LabelSnapshot, label_snapshot, labels_changed,
                                         labels_digest, latest_measurements)
from lakescore.monitoring.performance import performance

MAX_CATCH_UP = 20  # unmonitored runs handled per `lakescore monitor`, newest first
MAX_RELABEL = 100  # newest published runs whose labels are read again when the label table moves
NOOP = "noop: every published run is already monitored on the current labels"


def _share(part: int, whole: int) -> float:
    return float(part / whole) if whole else 0.0


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def prediction_distribution(predictions: pd.DataFrame) -> dict[str, Any]:
    """Class shares (or value quantiles) of the predicted rows, and probability quantiles."""
    scored = predictions[predictions["scoring_status"] == "predicted"]
    out: dict[str, Any] = {}
    if "probability" in scored.columns:
        labels = scored["prediction"].dropna()
        if pd.api.types.is_float_dtype(labels.dtype) and (labels == labels.round()).all():
            labels = labels.astype("int64")  # integer classes read back as float: 1, not 1.0
        shares = labels.astype(str).value_counts(normalize=True).sort_index()
        out["classes"] = {str(k): float(v) for k, v in shares.items()}
        column = "probability"
    else:
        column = "prediction"
    values = scored[column].astype("float64").dropna()
    if len(values):
        out[f"{column}_quantiles"] = {f"p{q}": float(np.quantile(values, q / 100)) for q in (5, 25, 50, 75, 95)}
    return out


def quality_row(predictions: pd.DataFrame, *, inputs: pd.DataFrame | None = None,
                labels: pd.Series | None = None, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """Quality figures of one run and model version.

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
        rows, predicted, excluded, exclusion_rate, invalid_exclusion_rate, exclusions_by_reason,
        null_share, prediction_distribution, mean_probability, psi (JSON texts for the mappings),
        max_feature_psi, prediction_psi, and :func:`~lakescore.monitoring.performance.performance`.
    """
    rows = len(predictions)
    status = predictions["scoring_status"]
    reasons = predictions.loc[status == "excluded", "exclusion_reason"].astype(str)
    by_reason = {str(k): int(v) for k, v in reasons.value_counts().sort_index().items()}
    predicted = int((status == "predicted").sum())
    probability = predictions.loc[status == "predicted", "probability"].astype("float64") \
        if "probability" in predictions.columns else pd.Series([], dtype="float64")
    psi = drift(profile, inputs if inputs is not None else pd.DataFrame(), predictions) if profile else {}
    features = [v for k, v in psi.items() if k != "prediction" and not math.isnan(v)]
    nulls = {c: float(inputs[c].isna().mean()) for c in inputs.columns} if inputs is not None and rows else {}
    return {
        "rows": rows, "predicted": predicted, "excluded": rows - predicted,
        "exclusion_rate": _share(rows - predicted, rows),
        "invalid_exclusion_rate": _share(sum(n for r, n in by_reason.items() if r.startswith("invalid:")), rows),
        "exclusions_by_reason": json.dumps(by_reason, sort_keys=True),
        "null_share": json.dumps(nulls, sort_keys=True),
        "prediction_distribution": json.dumps(prediction_distribution(predictions), sort_keys=True),
        "mean_probability": float(probability.mean()) if len(probability.dropna()) else float("nan"),
        "psi": json.dumps({k: _nan_to_none(v) for k, v in psi.items()}, sort_keys=True),
        "max_feature_psi": float(max(features)) if features else float("nan"),
        "prediction_psi": float(psi.get("prediction", float("nan"))),
        **performance(predictions, labels),
    }


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


@dataclass(frozen=True)
class MonitorResult:
    table: str
    action: str
    row: dict[str, Any]
    report: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"quality_table": self.table, "action": self.action, **self.row,
                **({"report": self.report} if self.report else {})}


def _model_facts(runtime: Any, name: str, version: int) -> tuple[list[str] | None, dict[str, Any] | None]:
    """Input columns (model signature) and drift profile of a registered version, when found."""
    try:
        mlflow = runtime.mlflow()
        from mlflow.models import get_model_info

        inputs = list(get_model_info(f"models:/{name}/{version}").signature.inputs.input_names())
        run_id = mlflow.MlflowClient().get_model_version(name, str(version)).run_id
    except Exception:  # a model outside this registry: no null shares, no drift
        return None, None
    try:
        profile = mlflow.artifacts.load_dict(f"runs:/{run_id}/drift_profile.json")
    except Exception:  # trained before drift profiles existed
        profile = None
    return inputs, profile


def _run_rows(runtime: Any, table: str, receipt: dict[str, Any]) -> pd.DataFrame:
    """The rows a run committed, read at the table version its commit created."""
    from lakescore.frames import nullable_pandas_type  # integers stay Int64, as in a table read

    only_run = [("run_id", "=", receipt["run_id"])]
    try:
        delta = runtime.delta_table(table, version=int(receipt["table_version"]))
        return delta.to_pandas(filters=only_run, types_mapper=nullable_pandas_type)
    except Exception:  # that version was vacuumed: what is left of the run now
        return runtime.delta_table(table).to_pandas(filters=only_run, types_mapper=nullable_pandas_type)


def _inputs(runtime: Any, receipt: dict[str, Any], keys: list[str], frame: pd.DataFrame,
            columns: list[str]) -> pd.DataFrame:
    source = receipt["source_table"]
    try:
        data = runtime.read_table(source, version=int(receipt["source_version_to"]), columns=[*keys, *columns])
    except Exception:  # the pinned version is gone: the rows as they are now
        data = runtime.read_table(source, columns=[*keys, *columns])
    data = data.astype({k: frame[k].dtype for k in keys}, errors="ignore")
    return frame[keys].merge(data, on=keys, how="left")[columns]


def read_labels(runtime: Any, mon: MonitoringConfig, keys: list[str], frame: pd.DataFrame) -> pd.Series | None:
    """True outcomes of ``frame``'s rows (by position) from ``label_table``, joined on the record
    keys; None when no label table is configured or it does not exist yet."""
    return label_snapshot(runtime, mon, keys).for_rows(frame, keys)


def _model_rows(frame: pd.DataFrame, version: Any) -> tuple[np.ndarray, pd.DataFrame]:
    mask = (frame["model_version"] == version).to_numpy(dtype=bool) if len(frame) else np.ones(0, bool)
    return mask, frame[mask].reset_index(drop=True)


def run_quality(project: ProjectConfig, runtime: Any, receipt: dict[str, Any],
                snapshot: LabelSnapshot | None = None) -> list[dict[str, Any]]:
    """Quality rows of one published run (one per model version in its rows), with alerts.

    ``snapshot`` is the label table as read for this ``lakescore monitor`` (read now when None);
    each row records its version and the digest of the labels it saw.
    """
    mon, keys = project.monitoring, list(project.training.data.record_keys)
    snapshot = snapshot if snapshot is not None else label_snapshot(runtime, mon, keys)
    frame = _run_rows(runtime, project.inference.prediction_table, receipt)
    out = []
    labels = snapshot.for_rows(frame, keys)
    versions = sorted(frame["model_version"].dropna().unique().tolist()) or [receipt["model_version"]]
    for version in versions:
        mask, part = _model_rows(frame, version)
        part_labels = None if labels is None else labels[mask].reset_index(drop=True)
        columns, profile = _model_facts(runtime, receipt["model_name"], int(version))
        inputs = _inputs(runtime, receipt, keys, part, columns) if columns and len(part) else None
        row = {"run_id": receipt["run_id"], "table_version": int(receipt["table_version"]),
               "model_name": receipt["model_name"], "model_version": int(version),
               "source_table": receipt["source_table"], "source_version_from": receipt.get("source_version_from"),
               "source_version_to": int(receipt["source_version_to"]), "mode": receipt.get("mode"),
               **quality_row(part, inputs=inputs, profile=profile, labels=part_labels),
               "label_table_version": snapshot.version, "labels_digest": labels_digest(part, keys, part_labels),
               "measurement": "first", "monitored_at": datetime.now(timezone.utc)}
        reasons = alerts(row, mon)
        row["alert"], row["alert_reasons"] = bool(reasons), json.dumps(reasons)
        out.append(row)
    return out


def remeasure(project: ProjectConfig, runtime: Any, receipt: dict[str, Any], latest: pd.DataFrame,
              snapshot: LabelSnapshot) -> list[dict[str, Any]]:
    """New quality rows of one run whose labels changed since its latest rows were measured.

    Parameters
    ----------
    project, runtime
        As for :func:`monitor_project`.
    receipt : dict
        The run's publish receipt.
    latest : DataFrame
        The run's latest quality row per model version (:func:`latest_measurements`).
    snapshot : LabelSnapshot
        The label table at its current version.

    Returns
    -------
    list of dict
        Per model version whose labels changed: its latest row with the performance recomputed,
        ``label_table_version``, ``labels_digest``, ``measurement = "labels_changed"`` and
        ``monitored_at`` now; empty when no label of the run changed.
    """
    keys = list(project.training.data.record_keys)
    frame = _run_rows(runtime, project.inference.prediction_table, receipt)
    labels = snapshot.for_rows(frame, keys)
    out = []
    for previous in latest.to_dict("records"):
        mask, part = _model_rows(frame, previous["model_version"])
        part_labels = None if labels is None else labels[mask].reset_index(drop=True)
        figures = performance(part, part_labels)
        digest = labels_digest(part, keys, part_labels)
        if labels_changed(previous, digest, figures):
            out.append({**{k: v for k, v in previous.items() if k not in PERFORMANCE_COLUMNS}, **figures,
                        "label_table_version": snapshot.version, "labels_digest": digest,
                        "measurement": "labels_changed", "monitored_at": datetime.now(timezone.utc)})
    return out


def _stale(latest: pd.DataFrame, snapshot: LabelSnapshot) -> pd.DataFrame:
    """Latest rows measured on an older label table version (or before versions were recorded)."""
    if snapshot.version is None or latest.empty:
        return latest.iloc[0:0]
    measured = latest["label_table_version"].astype("Int64")
    return latest[(measured.isna() | (measured < snapshot.version)).to_numpy(dtype=bool)]


def monitor_project(project: ProjectConfig, runtime: Any, *, report: str | None = None) -> MonitorResult:
    """Append the quality rows of every published run not monitored yet (up to 20, newest first)
    and of every run whose labels changed since it was last measured (among the newest 100), and
    write the HTML report when ``report`` names a path.

    A quality table written before label tracking gains the columns ``label_table_version``,
    ``labels_digest`` and ``measurement`` on the first append (Delta schema merge); its rows read
    as measured on an unknown label version.

    Raises
    ------
    LakescoreError
        When nothing has been published yet.
    """
    from lakescore.publish.state import receipts

    inf, mon = project.inference, project.monitoring
    found = receipts(str(runtime.table_path(inf.prediction_table)))
    if not found:
        raise LakescoreError(f"nothing is published in {inf.prediction_table} yet; run `lakescore score --publish`")
    quality = runtime.read_table(mon.quality_table) if runtime.table_exists(mon.quality_table) else None
    latest = latest_measurements(quality) if quality is not None else pd.DataFrame(columns=["run_id"])
    snapshot = label_snapshot(runtime, mon, list(project.training.data.record_keys))
    monitored, stale = set(latest["run_id"]), _stale(latest, snapshot)
    todo = [r for r in found if r["run_id"] not in monitored][:MAX_CATCH_UP]
    stale_runs = set(stale["run_id"])
    recheck = [r for r in found[:MAX_RELABEL] if r["run_id"] in stale_runs]
    remeasured = [row for receipt in reversed(recheck) for row in
                  remeasure(project, runtime, receipt, stale[stale["run_id"] == receipt["run_id"]], snapshot)]
    rows = [row for receipt in reversed(todo) for row in run_quality(project, runtime, receipt, snapshot)]
    rows = remeasured + rows
    if rows:
        frame = pd.DataFrame(rows).astype({"source_version_from": "Int64", "label_table_version": "Int64",
                                            "labels_digest": "string", "measurement": "string"})
        runtime.write_table(mon.quality_table, frame, mode="append", schema_mode="merge")
        action, last = f"appended {len(rows)} row(s)", rows[-1]
        if remeasured:
            action += f" ({len(remeasured)} re-measured on label table version {snapshot.version})"
    else:
        action, last = NOOP, quality.sort_values("monitored_at").iloc[-1].to_dict()
    written = None
    if report:
        from lakescore.monitoring.report import write_report

        written = str(write_report(project, runtime, report))
    return MonitorResult(mon.quality_table, action, last, written)
