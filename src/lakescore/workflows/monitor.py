"""``lakescore monitor``: append the quality rows of published runs not monitored yet, and of runs
whose labels changed, then write the HTML report when asked.

Reads (through the runtime) the prediction table's receipts, each run's committed rows at the
version its commit created, the run's input rows from the source at the version it pinned, the
label table, the model's signature and drift profile (MLflow), and the quality table. Where the
aggregates are computed is the route's (:meth:`lakescore.workflows.routes.base.Route.monitor_runs`,
the route of ``inference.batch_compute``): ``single_node`` reads the rows into pandas
(:class:`~lakescore.workflows.routes.single_node.PandasRuns`); ``spark`` reads them as Spark
DataFrames joined on the record keys and computes every aggregate on the executors
(:class:`~lakescore.workflows.routes.spark.SparkRuns`), so only aggregates reach the driver.
The figures come from the aggregates through one set of pure functions
(:mod:`lakescore.monitoring.quality`), the page from :mod:`lakescore.monitoring.report`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lakescore import progress
from lakescore.config import ProjectConfig
from lakescore.errors import LakescoreError
from lakescore.monitoring.labels import latest_measurements
from lakescore.monitoring.quality import first_row, remeasure, stale
from lakescore.monitoring.report import report_page
from lakescore.runtime import Runtime
from lakescore.workflows.routes import choose_route
from lakescore.workflows.routes.base import Runs

MAX_CATCH_UP = 20  # unmonitored runs handled per `lakescore monitor`, newest first
MAX_RELABEL = 100  # newest published runs whose labels are read again when the label table moves
NOOP = "noop: every published run is already monitored on the current labels"
RACED = "noop: a concurrent lakescore monitor appended these quality rows first"
QUALITY_KEY = ("run_id", "model_version", "label_table_version")
"""One quality row per run, model version and label table version, however many monitors run at
once: rows are appended with a merge-insert on this key (:meth:`lakescore.runtime.base.Tables.insert_new`)."""

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

    Monitors that run at once append each row once (:data:`QUALITY_KEY`): the one that loses the
    race inserts only what the other did not, and says so in its action (:data:`RACED` when it
    inserted nothing).

    Raises
    ------
    LakescoreError
        When nothing has been published yet.
    """
    inf, mon = project.inference, project.monitoring
    route = choose_route(runtime, inf.batch_compute)  # once for the run: its reader and its aggregates
    with progress.step(f"monitor: read receipts of {inf.prediction_table} and the labels"):
        found = route.target(inf.prediction_table).receipts()
        if not found:
            raise LakescoreError(f"nothing is published in {inf.prediction_table} yet; run `lakescore score --publish`")
        quality = runtime.read_table(mon.quality_table) if runtime.table_exists(mon.quality_table) else None
        latest = latest_measurements(quality) if quality is not None else pd.DataFrame(columns=["run_id"])
        runs = route.monitor_runs(project)
        snapshot = runs.snapshot
    monitored, old = set(latest["run_id"]), stale(latest, snapshot)
    todo = [r for r in found if r["run_id"] not in monitored][:MAX_CATCH_UP]
    stale_runs = set(old["run_id"])
    recheck = [r for r in found[:MAX_RELABEL] if r["run_id"] in stale_runs]
    remeasured = []
    for receipt in reversed(recheck):
        previous = old[old["run_id"] == receipt["run_id"]]
        with _run_step("re-measure", receipt):
            measured = runs.aggregates(receipt, versions=[int(v) for v in previous["model_version"]])
        remeasured += remeasure(previous, measured, snapshot.version)
    rows = []
    for receipt in reversed(todo):
        with _run_step("measure", receipt):
            rows += run_quality(project, runtime, receipt, runs)
    rows = remeasured + rows
    if rows:
        frame = pd.DataFrame(rows).astype({"source_version_from": "Int64", "label_table_version": "Int64",
                                            "labels_digest": "string", "measurement": "string"})
        appended = runtime.insert_new(mon.quality_table, frame, keys=QUALITY_KEY, schema_mode="merge")
        action, last = f"appended {appended} row(s)", rows[-1]
        if appended < len(rows):  # a concurrent `lakescore monitor` appended the others first
            action = RACED if not appended else f"{action} ({len(rows) - appended} appended by a concurrent monitor)"
        elif remeasured:
            action += f" ({len(remeasured)} re-measured on label table version {snapshot.version})"
    else:
        action, last = NOOP, quality.sort_values("monitored_at").iloc[-1].to_dict()  # type: ignore[union-attr]  # without rows to append, the quality table was read
    written = None
    if report:
        with progress.step(f"monitor: write report {report}"):
            written = str(write_report(project, runtime, report, runs=runs))
    return MonitorResult(mon.quality_table, action, last, written)


def _run_step(what: str, receipt: dict[str, Any]) -> AbstractContextManager[progress.Step]:
    """The progress step of one published run's aggregates: "monitor: measure run v3 (84,292 rows)"."""
    rows = receipt.get("rows_in")
    return progress.step(f"monitor: {what} run v{receipt.get('table_version')}"
                         + (f" ({int(rows):,} rows)" if rows is not None else ""))


def run_quality(project: ProjectConfig, runtime: Runtime, receipt: dict[str, Any], runs: Runs) -> list[dict[str, Any]]:
    """Quality rows of one published run (one per model version in its rows), with alerts.

    ``runs.snapshot`` is the label table as read for this ``lakescore monitor``; each row records
    its version and the digest of the labels it saw.
    """
    found: dict[int, tuple[list[str] | None, dict[str, Any] | None]] = {}

    def facts(version: int) -> tuple[list[str] | None, dict[str, Any] | None]:
        if version not in found:
            found[version] = model_facts(runtime, receipt["model_name"], version)
        return found[version]

    return [first_row(receipt, version, aggregates, profile=facts(version)[1], label_version=runs.snapshot.version,
                      monitoring=project.monitoring)
            for version, aggregates in runs.aggregates(receipt, facts=facts).items()]


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


def write_report(project: ProjectConfig, runtime: Runtime, path: str | Path, *, runs: Runs | None = None) -> Path:
    """Write the monitoring report of the project's prediction and quality tables to ``path``.

    The plots' bins come from ``runs`` (default: the project's route's,
    :meth:`~lakescore.workflows.routes.base.Route.monitor_runs`).

    Returns
    -------
    Path
        The file written (parent folders are created).
    """
    inf, mon = project.inference, project.monitoring
    runs = runs or choose_route(runtime, inf.batch_compute).monitor_runs(project)
    quality = runtime.read_table(mon.quality_table).sort_values(["table_version", "model_version", "monitored_at"])
    bins = runs.report_bins(latest_measurements(quality)["run_id"].iloc[-1])
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_page(f"lakescore monitoring: {inf.prediction_table}", quality, bins, mon))
    return out

