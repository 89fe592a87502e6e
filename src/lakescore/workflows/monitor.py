"""``lakescore monitor``: append the quality rows of published runs not monitored yet, and of runs
whose labels changed, then write the HTML report when asked.

Reads (through the runtime) the prediction table's receipts, each run's committed rows at the
version its commit created, the run's input rows from the source at the version it pinned, the
label table, the model's signature and drift profile (MLflow), and the quality table; the figures
come from :mod:`lakescore.monitoring.quality` and the page from :mod:`lakescore.monitoring.report`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lakescore.config import ProjectConfig
from lakescore.errors import LakescoreError
from lakescore.monitoring.labels import LabelSnapshot, label_snapshot, latest_measurements
from lakescore.monitoring.quality import first_row, model_rows, model_versions, remeasure, stale
from lakescore.monitoring.report import report_html
from lakescore.publish.state import receipts
from lakescore.runtime import Runtime

MAX_CATCH_UP = 20  # unmonitored runs handled per `lakescore monitor`, newest first
MAX_RELABEL = 100  # newest published runs whose labels are read again when the label table moves
NOOP = "noop: every published run is already monitored on the current labels"


@dataclass(frozen=True)
class MonitorResult:
    """What ``lakescore monitor`` did: the quality table, the action, the last row, the report path."""

    table: str
    action: str
    row: dict[str, Any]
    report: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"quality_table": self.table, "action": self.action, **self.row,
                **({"report": self.report} if self.report else {})}


def monitor(project: ProjectConfig, runtime: Runtime, *, report: str | None = None) -> MonitorResult:
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
    inf, mon = project.inference, project.monitoring
    keys = list(project.training.data.record_keys)
    found = receipts(runtime.table_location(inf.prediction_table))
    if not found:
        raise LakescoreError(f"nothing is published in {inf.prediction_table} yet; run `lakescore score --publish`")
    quality = runtime.read_table(mon.quality_table) if runtime.table_exists(mon.quality_table) else None
    latest = latest_measurements(quality) if quality is not None else pd.DataFrame(columns=["run_id"])
    snapshot = read_label_snapshot(project, runtime)
    monitored, old = set(latest["run_id"]), stale(latest, snapshot)
    todo = [r for r in found if r["run_id"] not in monitored][:MAX_CATCH_UP]
    stale_runs = set(old["run_id"])
    recheck = [r for r in found[:MAX_RELABEL] if r["run_id"] in stale_runs]
    remeasured = [row for receipt in reversed(recheck) for row in
                  remeasure(run_rows(runtime, inf.prediction_table, receipt),
                            old[old["run_id"] == receipt["run_id"]], snapshot, keys)]
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
    written = str(write_report(project, runtime, report)) if report else None
    return MonitorResult(mon.quality_table, action, last, written)


def run_quality(project: ProjectConfig, runtime: Runtime, receipt: dict[str, Any],
                snapshot: LabelSnapshot) -> list[dict[str, Any]]:
    """Quality rows of one published run (one per model version in its rows), with alerts.

    ``snapshot`` is the label table as read for this ``lakescore monitor``; each row records its
    version and the digest of the labels it saw.
    """
    mon, keys = project.monitoring, list(project.training.data.record_keys)
    frame = run_rows(runtime, project.inference.prediction_table, receipt)
    labels = snapshot.for_rows(frame, keys)
    out = []
    for version in model_versions(frame, receipt):
        mask, part = model_rows(frame, version)
        columns, profile = model_facts(runtime, receipt["model_name"], int(version))
        out.append(first_row(receipt, int(version), part,
                             inputs=run_inputs(runtime, receipt, keys, part, columns) if columns and len(part) else None,
                             profile=profile, labels=None if labels is None else labels[mask].reset_index(drop=True),
                             label_version=snapshot.version, keys=keys, monitoring=mon))
    return out


def read_label_snapshot(project: ProjectConfig, runtime: Runtime) -> LabelSnapshot:
    """The configured label table at its current version (empty when none is configured or it
    does not exist yet)."""
    mon = project.monitoring
    if not (mon.label_table and mon.label_column and runtime.table_exists(mon.label_table)):
        return LabelSnapshot(None, None)
    version = runtime.table_version(mon.label_table)
    return label_snapshot(runtime.read_table(mon.label_table, version=version), version, mon,
                          list(project.training.data.record_keys))


def model_facts(runtime: Runtime, name: str, version: int) -> tuple[list[str] | None, dict[str, Any] | None]:
    """Input columns (model signature) and drift profile of a registered version, when found."""
    try:
        mlflow = runtime.mlflow()
        from mlflow.models import get_model_info  # registry access

        inputs = list(get_model_info(f"models:/{name}/{version}").signature.inputs.input_names())
        run_id = mlflow.MlflowClient().get_model_version(name, str(version)).run_id
    except Exception:  # a model outside this registry: no null shares, no drift
        return None, None
    try:
        profile = mlflow.artifacts.load_dict(f"runs:/{run_id}/drift_profile.json")
    except Exception:  # trained before drift profiles existed
        profile = None
    return inputs, profile


def run_rows(runtime: Runtime, table: str, receipt: dict[str, Any]) -> pd.DataFrame:
    """The rows a run committed, read at the table version its commit created."""
    only_run = [("run_id", "=", receipt["run_id"])]
    try:
        return runtime.read_table(table, version=int(receipt["table_version"]), filters=only_run)
    except Exception:  # that version was vacuumed: what is left of the run now
        return runtime.read_table(table, filters=only_run)


def run_inputs(runtime: Runtime, receipt: dict[str, Any], keys: list[str], frame: pd.DataFrame,
               columns: list[str]) -> pd.DataFrame:
    """The model's input ``columns`` of ``frame``'s rows, from the source at the version the run
    pinned (joined on ``keys``, row order kept)."""
    source = receipt["source_table"]
    try:
        data = runtime.read_table(source, version=int(receipt["source_version_to"]), columns=[*keys, *columns])
    except Exception:  # the pinned version is gone: the rows as they are now
        data = runtime.read_table(source, columns=[*keys, *columns])
    data = data.astype({k: frame[k].dtype for k in keys}, errors="ignore")
    return frame[keys].merge(data, on=keys, how="left")[columns]


def write_report(project: ProjectConfig, runtime: Runtime, path: str | Path) -> Path:
    """Write the monitoring report of the project's prediction and quality tables to ``path``.

    Returns
    -------
    Path
        The file written (parent folders are created).
    """
    inf, mon = project.inference, project.monitoring
    quality = runtime.read_table(mon.quality_table).sort_values(["table_version", "model_version", "monitored_at"])
    table = runtime.read_table(inf.prediction_table)
    keys = list(project.training.data.record_keys)
    latest = table[table["run_id"] == latest_measurements(quality)["run_id"].iloc[-1]].reset_index(drop=True)
    labels = read_label_snapshot(project, runtime).for_rows(latest, keys)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_html(f"lakescore monitoring: {inf.prediction_table}", quality, table, labels, mon))
    return out
