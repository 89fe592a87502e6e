"""``lakescore monitor`` end to end: a real registered model with its drift profile, the real
single-node scoring route, a real publish, the quality table and the HTML report."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sklearn.metrics import accuracy_score, roc_auc_score

from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.monitoring.drift import training_profile
from lakescore.monitoring.quality import monitor_project
from lakescore.packaging import log_and_register
from lakescore.publish.run import publish_scored
from lakescore.rules import load_rules
from lakescore.scoring.run import score_project
from lakescore.training import fit_chain

FLIGHTS, INCOMING = "main.flights.flights", "main.flights.flights_incoming"
MODEL, QUALITY = "main.flights.late_arrival", "main.flights.late_arrival_quality"
FEATURES = ["month", "day", "hour", "dep_delay", "distance", "carrier", "origin", "dest"]


@pytest.fixture
def project(runtime, project_dir: Path, flights_sample: pd.DataFrame):
    """Flights in the lake, a model trained on months 1-9 registered with its drift profile, and
    months 10-12 scored and published."""
    path = project_dir / "inference.yml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "batch_compute": "single_node"}))
    project = load_project(project_dir)
    runtime.write_table(FLIGHTS, flights_sample)
    incoming = flights_sample[flights_sample["month"] >= 10]
    runtime.write_table(INCOMING, incoming.iloc[:300].reset_index(drop=True),
                        configuration={"delta.enableChangeDataFeed": "true"})
    train = flights_sample[(flights_sample["month"] <= 9) & flights_sample["arr_delay"].notna()]
    chain = fit_chain(train, (train["arr_delay"] > 15).astype("int64"), recipe=list(project.training.preprocessing),
                      model_class="LogisticRegression", model_params={"max_iter": 300}, feature_columns=FEATURES,
                      rules=load_rules(project.scoring))
    mlflow = runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=train.head(5), name=MODEL, alias="champion",
                         evidence=admit(chain, train.iloc[-256:]))
        mlflow.log_dict(training_profile(train, feature_columns=FEATURES, predictions=chain.predict(train)),
                        "drift_profile.json")
    publish_scored(project, runtime, score_project(project, runtime))
    return project


def test_quality_rows_drift_and_performance(project, runtime, tmp_path):
    first = monitor_project(project, runtime)
    row = first.row
    table = runtime.read_table("main.flights.late_arrival_predictions")
    assert first.action == "appended 1 row(s)" and row["rows"] == len(table) == 300
    assert row["excluded"] == int((table["scoring_status"] == "excluded").sum()) > 0
    psi = json.loads(row["psi"])
    assert set(psi) == {*FEATURES, "prediction"}
    assert psi["month"] > 1  # trained on months 1-9, scoring 10-12
    assert "psi[month]" in json.loads(row["alert_reasons"])[0] and row["alert"]
    assert json.loads(row["null_share"])["dep_time"] > 0  # cancelled flights, an input of the rule
    labels = runtime.read_table(FLIGHTS)[["flight_id", "arr_delay"]]
    joined = table.merge(labels, on="flight_id")
    scored = joined[(joined["scoring_status"] == "predicted") & joined["arr_delay"].notna()]
    truth = (scored["arr_delay"] > 15).astype(int)
    assert row["labelled_rows"] == len(scored)
    assert row["accuracy"] == pytest.approx(accuracy_score(truth, scored["prediction"].astype(int)))
    assert row["roc_auc"] == pytest.approx(roc_auc_score(truth, scored["probability"]))
    assert monitor_project(project, runtime).action == "noop: every published run is already monitored"
    from deltalake import write_deltalake

    incoming = runtime.read_table(FLIGHTS).query("month >= 10").iloc[300:340]
    write_deltalake(str(runtime.table_path(INCOMING)), incoming.reset_index(drop=True), mode="append")
    publish_scored(project, runtime, score_project(project, runtime))
    second = monitor_project(project, runtime, report=str(tmp_path / "out" / "report.html"))
    assert second.action == "appended 1 row(s)" and second.row["rows"] == 40
    quality = runtime.read_table(QUALITY)
    assert sorted(quality["table_version"]) == [1, 2] and quality["run_id"].is_unique

    html = (tmp_path / "out" / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 4  # exclusion rate, drift, calibration, prediction histogram
    assert all(base64.b64decode(i).startswith(b"\x89PNG\r\n\x1a\n") for i in images)
    assert not re.search(r'(src|href)="(?!data:)', html)  # self-contained: nothing to fetch
    assert "psi[month]" in html
