"""``lakescore monitor --report report.html``: one self-contained HTML file.

Plots are drawn with matplotlib's object API (no pyplot state, Agg canvas) and embedded as
base64 PNGs, so the file opens anywhere with no other file next to it: exclusion rates over runs,
drift (PSI) over runs, calibration of the latest labelled run, and the prediction histogram by
model version.
"""

from __future__ import annotations

import base64
import html
import io
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lakescore.config import ProjectConfig

SUMMARY_COLUMNS = ["table_version", "run_id", "model_version", "source_version_to", "rows", "predicted",
                   "excluded", "exclusion_rate", "invalid_exclusion_rate", "max_feature_psi", "prediction_psi",
                   "accuracy", "roc_auc", "alert", "alert_reasons"]


def _png(fig: Any) -> str:
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


def rates_plot(quality: pd.DataFrame, *, max_exclusion_rate: float, max_invalid: float) -> str:
    """Exclusion and invalid-exclusion rate per run (x: prediction table version), as a PNG (base64)."""
    fig, ax = _figure("Exclusion rate over runs")
    x = quality["table_version"].astype(int)
    ax.plot(x, quality["exclusion_rate"], marker="o", label="exclusion_rate")
    ax.plot(x, quality["invalid_exclusion_rate"], marker="s", label="invalid_exclusion_rate")
    ax.axhline(max_exclusion_rate, color="C0", ls="--", lw=1, label="max_exclusion_rate")
    ax.axhline(max_invalid, color="C1", ls=":", lw=1, label="max_invalid_exclusion_rate")
    ax.set_xlabel("prediction table version")
    ax.legend(fontsize=7)
    return _png(fig)


def drift_plot(quality: pd.DataFrame, *, max_psi: float) -> str:
    """Largest feature PSI and prediction PSI per run, as a PNG (base64)."""
    fig, ax = _figure("Drift (PSI against training) over runs")
    x = quality["table_version"].astype(int)
    ax.plot(x, quality["max_feature_psi"].astype("float64"), marker="o", label="max feature PSI")
    ax.plot(x, quality["prediction_psi"].astype("float64"), marker="s", label="prediction PSI")
    ax.axhline(max_psi, color="red", ls="--", lw=1, label="max_psi")
    ax.set_xlabel("prediction table version")
    ax.legend(fontsize=7)
    return _png(fig)


def calibration_plot(probability: np.ndarray, truth: np.ndarray, *, bins: int = 10) -> str:
    """Observed rate against mean predicted probability in ``bins`` equal-width bins (PNG, base64)."""
    fig, ax = _figure(f"Calibration (latest labelled run, {len(truth):,} rows)")
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(probability, edges[1:-1]), 0, bins - 1)
    used = [b for b in range(bins) if (which == b).any()]
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="perfect")
    ax.plot([probability[which == b].mean() for b in used], [truth[which == b].mean() for b in used],
            marker="o", label="model")
    ax.set_xlabel("mean predicted probability")
    ax.set_ylabel("observed rate")
    ax.legend(fontsize=7)
    return _png(fig)


def histogram_plot(predictions: pd.DataFrame) -> str:
    """Histogram of ``probability`` (or ``prediction``) of predicted rows, one series per model version."""
    column = "probability" if "probability" in predictions.columns else "prediction"
    fig, ax = _figure(f"{column} by model version")
    scored = predictions[predictions["scoring_status"] == "predicted"]
    for version, part in scored.groupby("model_version"):
        ax.hist(part[column].astype("float64").dropna(), bins=30, alpha=0.5, density=True, label=f"v{version}")
    ax.set_xlabel(column)
    ax.legend(fontsize=7)
    return _png(fig)


def render(title: str, quality: pd.DataFrame, images: dict[str, str]) -> str:
    """The HTML page: the latest quality rows, then each image inline (``data:image/png;base64``)."""
    shown = quality[[c for c in SUMMARY_COLUMNS if c in quality.columns]].tail(20)
    cells = []
    for _, row in shown.iterrows():
        style = ' class="alert"' if bool(row.get("alert")) else ""
        values = "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row.tolist())
        cells.append(f"<tr{style}>{values}</tr>")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in shown.columns)
    figures = "".join(f'<h2>{html.escape(name)}</h2><img alt="{html.escape(name)}" '
                      f'src="data:image/png;base64,{data}">' for name, data in images.items())
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:3px 6px}tr.alert{background:#fdd}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>written {stamp}</p><table><tr>{head}</tr>{''.join(cells)}</table>"
            f"{figures}</body></html>")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if np.isnan(value) else f"{value:.4f}"
    return str(value)


def write_report(project: ProjectConfig, runtime: Any, path: str | Path) -> Path:
    """Write the monitoring report of the project's prediction and quality tables to ``path``.

    Returns
    -------
    Path
        The file written (parent folders are created).
    """
    from lakescore.monitoring.quality import read_labels

    inf, mon = project.inference, project.monitoring
    quality = runtime.read_table(mon.quality_table).sort_values(["table_version", "model_version"])
    table = runtime.read_table(inf.prediction_table)
    images = {"Exclusion rate": rates_plot(quality, max_exclusion_rate=mon.max_exclusion_rate,
                                           max_invalid=mon.max_invalid_exclusion_rate),
              "Drift": drift_plot(quality, max_psi=mon.max_psi)}
    keys = list(project.training.data.record_keys)
    latest = table[table["run_id"] == quality["run_id"].iloc[-1]].reset_index(drop=True)
    labels = read_labels(runtime, mon, keys, latest)
    if labels is not None and "probability" in latest.columns:
        use = (latest["scoring_status"] == "predicted").to_numpy() & labels.notna().to_numpy()
        if use.any():
            images["Calibration"] = calibration_plot(latest.loc[use, "probability"].to_numpy(dtype="float64"),
                                                     labels[use].to_numpy(dtype="float64"))
    images["Prediction histogram"] = histogram_plot(table)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(f"lakescore monitoring: {inf.prediction_table}", quality, images))
    return out

