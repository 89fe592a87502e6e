"""The HTML report: whole-number version axes, the per-feature drift table, performance against
label arrival, and a real headless Chromium checking that the page fits a 1280-pixel window."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from lakescore.config import MonitoringConfig
from lakescore.monitoring.report import (
    ReportBins,
    calibration_plot,
    drift_plot,
    drift_table,
    histogram_plot,
    performance_plot,
    rates_plot,
    report_html,
)

MONITORING = MonitoringConfig(quality_table="main.m.q", max_psi=0.25)
FEATURES = ["month", "day", "dep_delay", "distance", "carrier", "origin", "dest", "hour"]


def quality_table(runs: int = 12) -> pd.DataFrame:
    """``runs`` published runs, each measured once without labels (label table version 0) and once
    more when labels arrived (version 1), with long run ids and many alert reasons."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(runs):
        psi = {f: float(rng.uniform(0, 2)) for f in FEATURES} | {"prediction": float(rng.uniform(0, 0.5))}
        reasons = [f"psi[{f}] {v:.4f} > max_psi 0.25" for f, v in sorted(psi.items()) if v > 0.25]
        base = {"run_id": f"{i:04d}" + "f" * 28, "table_version": i + 1, "model_name": "main.m.model",
                "model_version": 1, "source_version_to": i, "rows": 300, "predicted": 290, "excluded": 10,
                "exclusion_rate": 10 / 300, "invalid_exclusion_rate": 0.0, "psi": json.dumps(psi),
                "max_feature_psi": max(v for k, v in psi.items() if k != "prediction"),
                "prediction_psi": psi["prediction"], "alert": bool(reasons), "alert_reasons": json.dumps(reasons)}
        stamp = pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(days=i)
        rows.append({**base, "labelled_rows": 0, "accuracy": np.nan, "roc_auc": np.nan, "log_loss": np.nan,
                     "label_table_version": 0, "measurement": "first", "monitored_at": stamp})
        rows.append({**base, "labelled_rows": 280, "accuracy": 0.8 + i / 100, "roc_auc": 0.7 + i / 100,
                     "log_loss": 0.4, "label_table_version": 1, "measurement": "labels_changed",
                     "monitored_at": stamp + pd.Timedelta(days=30)})
    return pd.DataFrame(rows).astype({"label_table_version": "Int64"})


def visible_ticks(fig) -> np.ndarray:
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    ticks = ax.get_xticks()
    return ticks[(ticks >= low) & (ticks <= high)]


def test_version_axes_have_whole_number_ticks():
    two = quality_table(2)
    for fig in (rates_plot(two, max_exclusion_rate=0.2, max_invalid=0.05), drift_plot(two, max_psi=0.25)):
        assert list(visible_ticks(fig)) == [1, 2]  # not 1.0, 1.2, 1.4, ...
    # every run measured on label table version 1 only: one tick, not 0.96 ... 1.04
    assert list(visible_ticks(performance_plot(two))) == [1]
    many = quality_table(40)
    ticks = visible_ticks(rates_plot(many, max_exclusion_rate=0.2, max_invalid=0.05))
    assert 3 <= len(ticks) <= 12 and np.array_equal(ticks, np.round(ticks)), ticks


def test_performance_plot_needs_labelled_measurements():
    unlabelled = quality_table(3).query("measurement == 'first'")
    assert performance_plot(unlabelled) is None
    fig = performance_plot(quality_table(3))
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    accuracy = lines["accuracy, run v2 (model v1)"]
    assert list(accuracy.get_xdata()) == [1] and list(accuracy.get_ydata()) == pytest.approx([0.81])


def test_drift_table_lists_top_movers_sorted_by_the_newest_run():
    quality = pd.DataFrame({
        "run_id": ["a", "b", "b"], "table_version": [1, 2, 2], "model_version": [1, 1, 1],
        "monitored_at": pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-03"], utc=True),
        "psi": [json.dumps({"x": 0.9, "y": 0.1, "z": 0.0}), json.dumps({"x": 0.5, "y": 0.0, "z": 0.3}),
                json.dumps({"x": 0.2, "y": 0.3, "z": None})],  # run b's latest measurement is the one shown
    })
    page = drift_table(quality, max_psi=0.25, top=2)
    features = re.findall(r"<tr><td>(\w+)</td>", page)
    assert features == ["y", "x"]  # newest run: y 0.3 > x 0.2 > z missing; z is cut by top=2
    assert re.findall(r"<th>PSI ([^<]+)</th>", page) == ["run v2 (model v1)", "run v1 (model v1)"]
    assert page.count('class="num over"') == 2  # y 0.3 in run 2, x 0.9 in run 1; 0.25 would not count
    assert drift_table(quality.assign(psi="{}"), max_psi=0.25).startswith("<p>No drift figures")


def one_run(accuracy: float = 0.8968, roc_auc: float = 0.8947) -> pd.DataFrame:
    """The demo's first run: one measurement, accuracy and ROC AUC 0.0021 apart."""
    run = quality_table(1).query("measurement == 'labels_changed'").reset_index(drop=True)
    return run.assign(accuracy=accuracy, roc_auc=roc_auc)


def test_metric_axes_are_not_zoomed_onto_a_gap_of_0_002():
    ax = performance_plot(one_run()).axes[0]
    low, high = ax.get_ylim()
    assert high - low >= 0.1 and low < 0.8947 and high > 0.8968 and 0 <= low and high <= 1  # not 0.8946-0.8969
    assert ax.get_ylabel() == "accuracy / ROC AUC"
    ax = performance_plot(one_run(0.999, 0.998)).axes[0]
    assert ax.get_ylim()[1] == 1.0 and ax.get_ylim()[1] - ax.get_ylim()[0] >= 0.1  # kept inside [0, 1]
    rates = rates_plot(quality_table(3), max_exclusion_rate=0.2, max_invalid=0.05).axes[0]
    assert rates.get_ylim()[0] == 0 and rates.get_ylim()[1] > 0.2  # from 0, the thresholds in view


def test_every_plot_labels_its_y_axis():
    quality = quality_table(3)
    bins = ReportBins("probability", {1: ([0.0, 0.5, 1.0], [3, 5])})
    figures = {"rates": rates_plot(quality, max_exclusion_rate=0.2, max_invalid=0.05),
               "drift": drift_plot(quality, max_psi=0.25), "performance": performance_plot(quality),
               "calibration": calibration_plot([(4, 1.0, 1.0), (6, 4.2, 5.0)]), "histogram": histogram_plot(bins)}
    labels = {name: fig.axes[0].get_ylabel() for name, fig in figures.items()}
    assert labels == {"rates": "share of rows", "drift": "PSI", "performance": "accuracy / ROC AUC",
                      "calibration": "observed rate", "histogram": "density (share of rows per unit)"}


def test_a_one_run_series_shows_its_value_beside_the_point():
    ax = performance_plot(one_run()).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["0.8947", "0.8968"]
    assert ax.get_title() == "Performance as labels arrive\n(one point per series so far: a line appears from the next run)"
    first = one_run()
    later = first.assign(label_table_version=2, monitored_at=first["monitored_at"] + pd.Timedelta(days=1), accuracy=0.9)
    two = performance_plot(pd.concat([first, later], ignore_index=True)).axes[0]
    assert not two.texts and two.get_title() == "Performance as labels arrive"  # two points: a line


MEASURE = ("<script>window.addEventListener('load', () => {const d = document.documentElement;"
           "const p = document.createElement('pre'); p.id = 'measure';"
           "p.textContent = JSON.stringify({scroll: d.scrollWidth, client: d.clientWidth,"
           " images: Array.from(document.images).map(i => [i.alt, i.naturalWidth, i.naturalHeight])});"
           "document.body.appendChild(p);});</script></body>")


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    """Run headless Chromium once, isolated (its own profile, no network use of its own)."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("headless Chromium not found: install it with `apt-get install -y chromium`")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=1280,2000", *args],
        capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.parametrize("runs", [12, 1], ids=["twelve-runs", "first-run"])
def test_report_fits_a_1280_pixel_window_in_chromium(tmp_path, runs):
    quality = quality_table(runs)
    rng = np.random.default_rng(3)
    predictions = pd.DataFrame({"run_id": quality["run_id"].iloc[-1], "model_version": 1,
                                "scoring_status": "predicted", "probability": rng.uniform(0, 1, 200)})
    predictions["prediction"] = (predictions["probability"] > 0.5).astype(int)
    page = report_html("lakescore monitoring: main.m.predictions", quality, predictions,
                       pd.Series(rng.integers(0, 2, 200)), MONITORING)
    report = tmp_path / "report.html"
    report.write_text(page)
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE))

    dom = chromium("--virtual-time-budget=5000", "--dump-dom", measured.as_uri(), profile=tmp_path / "p1").stdout
    found = re.search(r'<pre id="measure">(\{.*?\})</pre>', dom)
    assert found, dom[-500:]
    width = json.loads(found.group(1))
    assert 1200 <= width["client"] <= 1280 and width["scroll"] <= width["client"], width
    shown = {alt: (w, h) for alt, w, h in width["images"]}
    assert list(shown) == ["Exclusion rate", "Drift", "Performance by label arrival", "Calibration",
                           "Prediction histogram"]
    assert all(w > 300 and h > 200 for w, h in shown.values()), shown  # every plot decoded and drawn

    shot = tmp_path / "report.png"
    chromium("--hide-scrollbars", f"--screenshot={shot}", report.as_uri(), profile=tmp_path / "p2")
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape == (2000, 1280, 3)
    assert (image[:, 40:1240] < 200).any()  # something was drawn: text, borders, plots
    right_margin = image[:, 1256:1276]  # inside the body's 2em (32 px) right margin
    assert (right_margin == 255).all(), "the page draws into its right margin: a table runs off the edge"
