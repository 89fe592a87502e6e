"""``lakescore monitor --report report.html``: one self-contained HTML file.

Plots are drawn with matplotlib's object API (no pyplot state, Agg canvas) and embedded as
base64 PNGs, so the file opens anywhere with no other file next to it: exclusion rates over runs,
drift (PSI) over runs with a table of the features that moved most, performance against label
arrival (label table version) with every measurement in a table, calibration of the latest labelled
run, and the prediction histogram by model version. Table versions are whole numbers on every axis;
every y axis is labelled; a rate or metric bounded by 0 and 1 gets an axis at least
:data:`METRIC_MIN_SPAN` tall (not matplotlib's zoom onto a 0.002 gap); a series of one run shows its
value beside the point.
Tables sit in horizontally scrolling boxes with wrapping cells, so the page never runs off the
right edge of the window.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from lakescore.config import MonitoringConfig
from lakescore.monitoring.labels import latest_measurements, with_tracking_columns

SUMMARY_COLUMNS = ["table_version", "run_id", "model_version", "source_version_to", "rows", "predicted",
                   "excluded", "exclusion_rate", "invalid_exclusion_rate", "max_feature_psi", "prediction_psi",
                   "labelled_rows", "accuracy", "roc_auc", "rmse", "label_table_version", "alert", "alert_reasons"]
MEASUREMENT_COLUMNS = ["table_version", "model_version", "measurement", "label_table_version", "monitored_at",
                       "labelled_rows", "accuracy", "roc_auc", "log_loss", "rmse", "mae"]
TOP_MOVERS = 15  # features in the drift table
DRIFT_RUNS = 5  # latest runs side by side in the drift table
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1400px}"
         ".scroll{max-width:100%;overflow-x:auto;margin-bottom:1em}"
         "table{border-collapse:collapse;font-size:12px;width:100%}"
         "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}td{overflow-wrap:anywhere}"
         "th{background:#f3f3f3;text-align:left;font-weight:600}td.num{text-align:right;white-space:nowrap}"
         "td.reasons{min-width:15em}td.flag{white-space:nowrap}"
         "td.id{font-family:monospace;font-size:11px;word-break:break-all;min-width:8em}"
         "tr.alert{background:#fdd}td.over{background:#fdd;font-weight:bold}img{max-width:100%}")


def png(fig: Any) -> str:
    """The figure as a base64 PNG (Agg canvas, 90 dpi, tight box)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # headless: no display needed

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(title: str) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return fig, ax


def _version_axis(ax: Any, label: str, versions: Any) -> None:
    """A table version axis: whole-number ticks only (a version 0.96 does not exist).

    Up to 12 distinct versions get a tick each, exactly where the points are (a single version
    too, where matplotlib's integer locator would fall back to fractions); more get
    ``MaxNLocator(integer=True)``.
    """
    from matplotlib.ticker import MaxNLocator

    present = sorted({int(v) for v in versions})
    if 0 < len(present) <= 12:
        ax.set_xticks(present)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(label)


METRIC_MIN_SPAN = 0.1
"""Least height of the y axis of a metric bounded by 0 and 1 (accuracy, ROC AUC, rates), so a gap
of 0.002 between two figures stays a small gap instead of filling the plot."""


def _bounded_axis(ax: Any, values: Any, label: str, *, low: float = 0.0, high: float = 1.0,
                  min_span: float = METRIC_MIN_SPAN) -> None:
    """A y axis for figures between ``low`` and ``high``: the data with a margin, at least
    ``min_span`` tall, inside ``[low, high]`` (matplotlib would zoom to the data's own range)."""
    shown = [float(v) for v in values if v is not None and np.isfinite(float(v))]
    if not shown:
        ax.set_ylabel(label)
        return
    top, bottom = max(shown), min(shown)
    span = max(top - bottom, min_span) * 1.2  # a tenth of margin above and below
    start, end = (top + bottom - span) / 2, (top + bottom + span) / 2
    if start < low:
        start, end = low, min(low + span, high)
    if end > high:
        start, end = max(high - span, low), high
    ax.set_ylim(start, end)
    ax.set_ylabel(label)


def _label_lone_points(ax: Any) -> None:
    """Write the value beside each series that has a single point (one run: no line to read a
    trend from yet), and say so under the title."""
    lone = [line for line in ax.get_lines() if len(line.get_xdata()) == 1 and line.get_marker() not in (None, "None", "")]
    for i, line in enumerate(lone):
        x, y = line.get_xdata()[0], line.get_ydata()[0]
        if np.isfinite(float(y)):  # staggered: two close values stay readable
            ax.annotate(f"{float(y):.4f}", (x, y), xytext=(7, 5 - 11 * i), textcoords="offset points", fontsize=7,
                        va="center", color=line.get_color())
    if lone:
        ax.set_title(f"{ax.get_title()}\n{ONE_POINT}", fontsize=10)


ONE_POINT = "(one point per series so far: a line appears from the next run)"


def rates_plot(quality: pd.DataFrame, *, max_exclusion_rate: float, max_invalid: float) -> Any:
    """Exclusion and invalid-exclusion rate per run (x: prediction table version), a matplotlib Figure."""
    fig, ax = _figure("Exclusion rate over runs")
    x = quality["table_version"].astype(int)
    ax.plot(x, quality["exclusion_rate"], marker="o", label="exclusion_rate")
    ax.plot(x, quality["invalid_exclusion_rate"], marker="s", label="invalid_exclusion_rate")
    ax.axhline(max_exclusion_rate, color="C0", ls="--", lw=1, label="max_exclusion_rate")
    ax.axhline(max_invalid, color="C1", ls=":", lw=1, label="max_invalid_exclusion_rate")
    _version_axis(ax, "prediction table version", x)
    _bounded_axis(ax, [*quality["exclusion_rate"], *quality["invalid_exclusion_rate"], max_exclusion_rate, max_invalid],
                  "share of rows")
    _label_lone_points(ax)
    ax.legend(fontsize=7)
    return fig


def drift_plot(quality: pd.DataFrame, *, max_psi: float) -> Any:
    """Largest feature PSI and prediction PSI per run (x: prediction table version), a Figure."""
    fig, ax = _figure("Drift (PSI against training) over runs")
    x = quality["table_version"].astype(int)
    ax.plot(x, quality["max_feature_psi"].astype("float64"), marker="o", label="max feature PSI")
    ax.plot(x, quality["prediction_psi"].astype("float64"), marker="s", label="prediction PSI")
    ax.axhline(max_psi, color="red", ls="--", lw=1, label="max_psi")
    _version_axis(ax, "prediction table version", x)
    ax.set_ylim(bottom=0)  # PSI has no upper bound: from 0, so a small figure looks small
    ax.set_ylabel("PSI")
    _label_lone_points(ax)
    ax.legend(fontsize=7)
    return fig


CALIBRATION_BINS = 10  # equal-width probability bins of the calibration curve
HISTOGRAM_BINS = 30  # equal-width bins of each model version's prediction histogram


@dataclass(frozen=True)
class ReportBins:
    """What the calibration curve and the histogram plot, as bin counts (either engine).

    ``calibration`` holds (rows, sum of probabilities, sum of labels) per probability bin of the
    latest run's labelled predicted rows (None: no labels or no probability); ``histograms`` maps
    each model version to (edges, counts) of ``column`` over the predicted rows.
    """

    column: str
    histograms: dict[int, tuple[list[float], list[int]]]
    calibration: list[tuple[int, float, float]] | None = None


def calibration_bins(probability: np.ndarray, truth: np.ndarray, *, bins: int = CALIBRATION_BINS) -> list[tuple[int, float, float]]:
    """(rows, sum of probability, sum of truth) per equal-width probability bin (pandas engine).

    A probability's bin is the number of inner edges ``linspace(0, 1, bins + 1)[1:-1]`` at or
    below it (``numpy.digitize``).
    """
    which = np.clip(np.digitize(probability, np.linspace(0, 1, bins + 1)[1:-1]), 0, bins - 1)
    return [(int((which == b).sum()), float(probability[which == b].sum()), float(truth[which == b].sum()))
            for b in range(bins)]


def histogram_edges(low: float, high: float, *, bins: int = HISTOGRAM_BINS) -> list[float]:
    """numpy's equal-width histogram edges from ``low`` to ``high`` (one unit wide around a single value)."""
    if low == high:
        low, high = low - 0.5, high + 0.5
    return np.linspace(low, high, bins + 1).tolist()


def histogram_column(columns: Any) -> str:
    """The column the prediction histogram shows: ``probability``, else ``prediction``; for a model
    set its first component's (the first ``<component>_probability``, else ``<component>_prediction``).

    >>> histogram_column(["flight_id", "minutes_model_prediction", "delay_model_probability", "scoring_status"])
    'delay_model_probability'
    """
    names = list(columns)
    for suffix in ("probability", "prediction"):
        if suffix in names:
            return suffix
    for suffix in ("_probability", "_prediction"):
        found = [c for c in names if c.endswith(suffix)]
        if found:
            return found[0]
    return "prediction"


def histogram_bins(predictions: pd.DataFrame) -> ReportBins:
    """Edges and counts per model version of ``probability`` (or ``prediction``) of the predicted rows."""
    column = histogram_column(predictions.columns)
    scored = predictions[predictions["scoring_status"] == "predicted"]
    out = {}
    for version, part in scored.groupby("model_version"):
        values = part[column].astype("float64").dropna().to_numpy()
        if len(values):
            edges = histogram_edges(float(values.min()), float(values.max()))
            out[int(version)] = (edges, np.histogram(values, bins=edges)[0].astype(int).tolist())
    return ReportBins(column, out)


def pandas_report_bins(predictions: pd.DataFrame, run_id: str, labels: pd.Series | None) -> ReportBins:
    """:class:`ReportBins` from the prediction table read into pandas: histograms of every
    predicted row, calibration of run ``run_id``'s rows with ``labels`` (by position in them)."""
    latest = predictions[predictions["run_id"] == run_id].reset_index(drop=True)
    bins = histogram_bins(predictions)
    if labels is not None and "probability" in latest.columns:
        use = (latest["scoring_status"] == "predicted").to_numpy() & labels.notna().to_numpy()
        if use.any():
            bins = replace(bins, calibration=calibration_bins(latest.loc[use, "probability"].to_numpy(dtype="float64"),
                                                              labels[use].to_numpy(dtype="float64")))
    return bins


def calibration_plot(bins: list[tuple[int, float, float]]) -> Any:
    """Observed rate against mean predicted probability per bin (:func:`calibration_bins`), a Figure."""
    fig, ax = _figure(f"Calibration (latest labelled run, {sum(n for n, _, _ in bins):,} rows)")
    used = [(p / n, t / n) for n, p, t in bins if n]
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="perfect")
    ax.plot([p for p, _ in used], [t for _, t in used], marker="o", label="model")
    ax.set_xlabel("mean predicted probability")
    ax.set_ylabel("observed rate")
    ax.legend(fontsize=7)
    return fig


def histogram_plot(bins: ReportBins) -> Any:
    """Histogram (density) of ``bins.column`` of predicted rows, one series per model version."""
    fig, ax = _figure(f"{bins.column} by model version")
    for version, (edges, counts) in sorted(bins.histograms.items()):
        ax.hist(edges[:-1], bins=edges, weights=counts, alpha=0.5, density=True, label=f"v{version}")
    ax.set_xlabel(bins.column)
    ax.set_ylabel("density (share of rows per unit)")
    ax.legend(fontsize=7)
    return fig


def performance_plot(quality: pd.DataFrame, *, runs: int = 8) -> Any | None:
    """Performance of each run against the label table version it was measured on, a Figure.

    One line per run (the latest ``runs``, labelled by prediction table version): accuracy (solid,
    circles) and ROC AUC (dashed, squares) for a classifier, RMSE for a regressor. None when no measurement has a
    labelled row and a label table version.
    """
    measured = with_tracking_columns(quality)
    measured = measured[(measured["labelled_rows"].fillna(0) > 0) & measured["label_table_version"].notna()]
    if measured.empty:
        return None
    classifier = "accuracy" in measured.columns and measured["accuracy"].notna().any()
    metrics = [("accuracy", "-", "o"), ("roc_auc", "--", "s")] if classifier else [("rmse", "-", "o")]
    fig, ax = _figure("Performance as labels arrive")
    shown = measured[measured["table_version"].isin(sorted(measured["table_version"].unique())[-runs:])]
    for i, ((table_version, model_version), part) in enumerate(shown.groupby(["table_version", "model_version"])):
        part = part.sort_values(["label_table_version", "monitored_at"])
        for metric, style, marker in metrics:
            if metric in part.columns:
                ax.plot(part["label_table_version"].astype(int), part[metric].astype("float64"), ls=style,
                        marker=marker, color=f"C{i % 10}",
                        label=f"{metric}, run v{table_version} (model v{model_version})")
    _version_axis(ax, "label table version", shown["label_table_version"])
    values = [v for metric, _, _ in metrics if metric in shown.columns for v in shown[metric].astype("float64")]
    if classifier:  # accuracy and ROC AUC lie in [0, 1]: an axis at least 0.1 tall, not zoomed to their gap
        _bounded_axis(ax, values, "accuracy / ROC AUC")
    else:
        ax.set_ylim(bottom=0)
        ax.set_ylabel("RMSE")
    _label_lone_points(ax)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: no point hidden
    return fig


def drift_table(quality: pd.DataFrame, *, max_psi: float, runs: int = DRIFT_RUNS, top: int = TOP_MOVERS) -> str:
    """HTML table of the features that moved most: PSI per feature for the latest ``runs`` runs
    (newest first), sorted by the newest run's PSI, largest first, the ``top`` largest only.
    A PSI above ``max_psi`` is highlighted."""
    latest = latest_measurements(quality).sort_values(["table_version", "model_version"]).tail(runs).iloc[::-1]
    psi = {f"run v{r.table_version} (model v{r.model_version})": json.loads(r.psi or "{}")
           for r in latest.itertuples()}
    frame = pd.DataFrame(psi, dtype="float64")
    if frame.empty:
        return "<p>No drift figures: the model has no drift profile.</p>"
    frame = frame.sort_values(list(frame.columns), ascending=False, na_position="last").head(top)
    head = "<th>feature</th>" + "".join(f"<th>PSI {html.escape(c)}</th>" for c in frame.columns)
    body = "".join(
        f"<tr><td>{html.escape(str(feature))}</td>" + "".join(
            f'<td class="num{" over" if v > max_psi else ""}">{_fmt(float(v))}</td>' for v in values) + "</tr>"
        for feature, values in frame.iterrows())
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def _table(frame: pd.DataFrame, *, alert_rows: bool = False) -> str:
    head = "".join(f"<th>{html.escape(c).replace('_', '_<wbr>')}</th>" for c in frame.columns)
    cells = []
    for _, row in frame.iterrows():
        style = ' class="alert"' if alert_rows and bool(row.get("alert")) else ""
        values = "".join(_cell(c, v) for c, v in row.items())
        cells.append(f"<tr{style}>{values}</tr>")
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(cells)}</table></div>'


def _cell(column: str, value: Any) -> str:
    if column == "alert_reasons" and isinstance(value, str):
        return f"<td class=\"reasons\">{'<br>'.join(html.escape(r) for r in json.loads(value or '[]'))}</td>"
    if isinstance(value, (bool, np.bool_)):
        return f'<td class="flag">{"yes" if value else "no"}</td>'
    kind = ' class="id"' if column == "run_id" else (' class="num"' if isinstance(value, (int, float, np.number))
                                                     and not isinstance(value, bool) else "")
    return f"<td{kind}>{html.escape(_fmt(value))}</td>"


def render(title: str, quality: pd.DataFrame, images: dict[str, str], *,
           sections: dict[str, str] | None = None) -> str:
    """The HTML page: the latest quality row of each run (the last 20), every measurement on
    arriving labels, then ``sections`` (title -> HTML) and each image inline
    (``data:image/png;base64``), in that order."""
    latest = latest_measurements(quality)
    shown = latest[[c for c in SUMMARY_COLUMNS if c in latest.columns]].tail(20)
    shown = shown.loc[:, [c for c in shown.columns if c in ("alert", "alert_reasons") or shown[c].notna().any()]]
    measured = with_tracking_columns(quality)
    measured = measured[measured["run_id"].isin(measured.loc[measured["measurement"] == "labels_changed", "run_id"])]
    parts = [f"<h2>Runs (latest measurement)</h2>{_table(shown, alert_rows=True)}"]
    if not measured.empty:
        columns = [c for c in MEASUREMENT_COLUMNS if c in measured.columns and measured[c].notna().any()]
        parts.append("<h2>Measurements as labels arrived</h2>"
                     f"{_table(measured.sort_values(['table_version', 'monitored_at'])[columns])}")
    parts += [f"<h2>{html.escape(name)}</h2>{body}" for name, body in (sections or {}).items()]
    parts += [f'<h2>{html.escape(name)}</h2><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
              for name, data in images.items()]
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><p>written {stamp}</p>"
            f"{''.join(parts)}</body></html>")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if np.isnan(value) else f"{value:.4f}"
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    if isinstance(value, pd.Timestamp):
        return value.isoformat(timespec="seconds")
    return str(value)


def report_html(title: str, quality: pd.DataFrame, predictions: pd.DataFrame, labels: pd.Series | None,
                monitoring: MonitoringConfig) -> str:
    """The whole report page from the quality table and the prediction table (pandas engine).

    Parameters
    ----------
    title : str
        Page title.
    quality : DataFrame
        The quality table as read (every measurement).
    predictions : DataFrame
        The prediction table (for the histogram, and the latest run's rows for calibration).
    labels : Series or None
        Labels of the latest run's rows by position in ``predictions[run_id == latest]``.
    monitoring : MonitoringConfig
        Thresholds drawn on the plots.
    """
    runs = latest_measurements(quality.sort_values(["table_version", "model_version", "monitored_at"]))
    bins = pandas_report_bins(predictions, runs["run_id"].iloc[-1], labels)
    return report_page(title, quality, bins, monitoring)


def report_page(title: str, quality: pd.DataFrame, bins: ReportBins, monitoring: MonitoringConfig) -> str:
    """The whole report page from the quality table and the plots' bins (either engine).

    Parameters
    ----------
    title : str
        Page title.
    quality : DataFrame
        The quality table as read (every measurement).
    bins : ReportBins
        Calibration bins of the latest run and histogram bins per model version.
    monitoring : MonitoringConfig
        Thresholds drawn on the plots.
    """
    quality = quality.sort_values(["table_version", "model_version", "monitored_at"])
    runs = latest_measurements(quality)
    images = {"Exclusion rate": png(rates_plot(runs, max_exclusion_rate=monitoring.max_exclusion_rate,
                                              max_invalid=monitoring.max_invalid_exclusion_rate)),
              "Drift": png(drift_plot(runs, max_psi=monitoring.max_psi))}
    performance = performance_plot(quality)
    if performance is not None:
        images["Performance by label arrival"] = png(performance)
    if bins.calibration and any(n for n, _, _ in bins.calibration):
        images["Calibration"] = png(calibration_plot(bins.calibration))
    images["Prediction histogram"] = png(histogram_plot(bins))
    sections = {"Drift by feature (top movers)": drift_table(quality, max_psi=monitoring.max_psi)}
    return render(title, quality, images, sections=sections)
