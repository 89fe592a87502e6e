"""``lakescore monitor`` end to end: a real registered model with its drift profile, the real
single-node scoring route, a real publish, the quality table, labels that arrive late in a real
Delta label table, and the HTML report."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake
from fixtures.configs import CONFIG, without_feature_lookups
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

from lakescore import progress
from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.monitoring.drift import training_profile
from lakescore.monitoring.labels import TRACKING_COLUMNS
from lakescore.packaging import log_and_register
from lakescore.progress import LineReporter
from lakescore.rules import load_rules
from lakescore.training import ChainRecipe, fit_chain
from lakescore.workflows.monitor import NOOP, monitor
from lakescore.workflows.publish import publish
from lakescore.workflows.score import score

FLIGHTS, INCOMING = "main.flights.flights", "main.flights.flights_incoming"
MODEL, QUALITY = "main.flights.late_arrival", "main.flights.late_arrival_quality"
FEATURES = ["month", "day", "hour", "dep_delay", "distance", "carrier", "origin", "dest"]


@pytest.fixture(scope="module")
def admitted(tmp_path_factory: pytest.TempPathFactory, flights_sample: pd.DataFrame):
    """The chain every test here registers, fitted and admitted once for the module:
    ``(chain, evidence, training rows)``: the demo recipe without its lookups on :data:`FEATURES`,
    LogisticRegression of ``arr_delay > 15`` on the sample's months 1-9, with config/scoring.yml's rules."""
    config = tmp_path_factory.mktemp("monitor-chain") / "config"
    shutil.copytree(CONFIG, config)
    without_feature_lookups(config)  # the chain is fitted here on FEATURES, with the demo recipe's other steps
    project = load_project(config)
    train = flights_sample[(flights_sample["month"] <= 9) & flights_sample["arr_delay"].notna()]
    chain = fit_chain(train, (train["arr_delay"] > 15).astype("int64"),
                      ChainRecipe(steps=list(project.training.preprocessing), model_class="LogisticRegression",
                                  model_params={"max_iter": 300}, feature_columns=FEATURES,
                                  rules=load_rules(project.scoring)))
    return chain, admit(chain, train.iloc[-256:]), train


def publish_project(runtime, project_dir: Path, flights_sample: pd.DataFrame, lake: pd.DataFrame, admitted):
    """``lake`` as the flights (label) table, the :func:`admitted` chain (trained on months 1-9 of
    the sample) registered with its drift profile, and 300 flights of months 10-12 scored and published."""
    path = project_dir / "inference.yml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "batch_compute": "single_node"}))
    without_feature_lookups(project_dir)  # as the admitted chain's config
    project = load_project(project_dir)
    runtime.write_table(FLIGHTS, lake)
    incoming = flights_sample[flights_sample["month"] >= 10]
    runtime.write_table(INCOMING, incoming.iloc[:300].reset_index(drop=True),
                        configuration={"delta.enableChangeDataFeed": "true"})
    chain, evidence, train = admitted
    mlflow = runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=train.head(5), name=MODEL, alias="champion", evidence=evidence)
        mlflow.log_dict(training_profile(train, feature_columns=FEATURES, predictions=chain.predict(train)),
                        "drift_profile.json")
    publish(project, runtime, score(project, runtime))
    return project


@pytest.fixture
def project(runtime, project_dir: Path, flights_sample: pd.DataFrame, admitted):
    """Every label already known when the run is first monitored."""
    return publish_project(runtime, project_dir, flights_sample, flights_sample, admitted)


def test_quality_rows_drift_and_performance(project, runtime, tmp_path):
    first = monitor(project, runtime)
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
    assert monitor(project, runtime).action == NOOP
    from deltalake import write_deltalake

    incoming = runtime.read_table(FLIGHTS).query("month >= 10").iloc[300:340]
    write_deltalake(str(runtime.table_path(INCOMING)), incoming.reset_index(drop=True), mode="append")
    shown = io.StringIO()
    with progress.use(LineReporter(shown)):
        publish(project, runtime, score(project, runtime))
        second = monitor(project, runtime, report=str(tmp_path / "out" / "report.html"))
    assert second.action == "appended 1 row(s)" and second.row["rows"] == 40
    # publish and monitor say what they are doing while they do it
    lines = [re.sub(r" in [0-9.]+ s$", "", line) for line in shown.getvalue().splitlines()]
    target = "main.flights.late_arrival_predictions"
    assert lines[-8:] == [
        f"lakescore: publish (delta-rs) {target}: started", f"lakescore: publish (delta-rs) {target}: done, 40 rows",
        f"lakescore: monitor: read receipts of {target} and the labels: started",
        f"lakescore: monitor: read receipts of {target} and the labels: done",
        "lakescore: monitor: measure run v2 (40 rows): started", "lakescore: monitor: measure run v2 (40 rows): done",
        f"lakescore: monitor: write report {tmp_path / 'out' / 'report.html'}: started",
        f"lakescore: monitor: write report {tmp_path / 'out' / 'report.html'}: done"]
    quality = runtime.read_table(QUALITY)
    assert sorted(quality["table_version"]) == [1, 2] and quality["run_id"].is_unique
    assert list(quality["label_table_version"]) == [0, 0] and list(quality["measurement"]) == ["first", "first"]

    html = (tmp_path / "out" / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 5  # exclusion rate, drift, performance by label arrival, calibration, histogram
    assert all(base64.b64decode(i).startswith(b"\x89PNG\r\n\x1a\n") for i in images)
    assert not re.search(r'(src|href)="(?!data:)', html)  # self-contained: nothing to fetch
    assert "psi[month]" in html


def expected_performance(runtime, flights_sample: pd.DataFrame) -> dict[str, float]:
    """sklearn's figures on the published rows that were predicted and have a known arrival delay."""
    table = runtime.read_table("main.flights.late_arrival_predictions")
    joined = table.merge(flights_sample[["flight_id", "arr_delay"]], on="flight_id")
    scored = joined[(joined["scoring_status"] == "predicted") & joined["arr_delay"].notna()]
    truth = (scored["arr_delay"] > 15).astype(int)
    return {"labelled_rows": len(scored),
            "accuracy": accuracy_score(truth, scored["prediction"].astype(int)),
            "roc_auc": roc_auc_score(truth, scored["probability"]),
            "log_loss": log_loss(truth, scored["probability"].astype(float), labels=[0, 1])}


@pytest.mark.parametrize("older_table", [False, True], ids=["current", "table-written-before-label-tracking"])
def test_labels_that_arrive_late_are_measured(runtime, project_dir, flights_sample, tmp_path, older_table, admitted):
    waiting = flights_sample.assign(arr_delay=flights_sample["arr_delay"].where(flights_sample["month"] <= 9))
    project = publish_project(runtime, project_dir, flights_sample, waiting, admitted)
    first = monitor(project, runtime)
    assert first.row["labelled_rows"] == 0 and np.isnan(first.row["accuracy"])
    assert first.row["label_table_version"] == 0 and first.row["measurement"] == "first"
    if older_table:  # the quality table as a lakescore without label tracking wrote it
        old = runtime.read_table(QUALITY).drop(columns=list(TRACKING_COLUMNS))
        write_deltalake(str(runtime.table_path(QUALITY)), old, mode="overwrite", schema_mode="overwrite")
        assert not set(TRACKING_COLUMNS) & set(runtime.table_columns(QUALITY))

    # the delays arrive: a real MERGE into the label table, its version 1
    arrived = flights_sample[flights_sample["month"] >= 10][["flight_id", "arr_delay"]]
    DeltaTable(str(runtime.table_path(FLIGHTS))).merge(
        arrived, predicate="t.flight_id = s.flight_id", source_alias="s", target_alias="t",
    ).when_matched_update(updates={"arr_delay": "s.arr_delay"}).execute()
    assert runtime.table_version(FLIGHTS) == 1
    second = monitor(project, runtime, report=str(tmp_path / "report.html"))
    assert second.action == "appended 1 row(s) (1 re-measured on label table version 1)"
    expected = expected_performance(runtime, flights_sample)
    assert expected["labelled_rows"] > 100
    assert second.row["labelled_rows"] == expected["labelled_rows"]
    for metric in ("accuracy", "roc_auc", "log_loss"):
        assert second.row[metric] == pytest.approx(expected[metric], rel=1e-12), metric

    quality = runtime.read_table(QUALITY).sort_values("monitored_at").reset_index(drop=True)
    assert len(quality) == 2 and quality["run_id"].nunique() == 1
    assert quality["measurement"].tolist() == ([None] if older_table else ["first"]) + ["labels_changed"]
    assert quality["label_table_version"].astype("Int64").fillna(-1).tolist() == [-1 if older_table else 0, 1]
    assert quality["labelled_rows"].tolist() == [0, expected["labelled_rows"]]  # the first figure is kept
    assert quality["monitored_at"].iloc[0] < quality["monitored_at"].iloc[1]
    assert quality["psi"].iloc[0] == quality["psi"].iloc[1] and quality["rows"].tolist() == [300, 300]

    assert monitor(project, runtime).action == NOOP  # no label change: nothing to do
    # the label table moves on, but not for this run's flights: still nothing to re-measure
    DeltaTable(str(runtime.table_path(FLIGHTS))).update(predicate="month = 1", updates={"arr_delay": "arr_delay + 1"})
    assert runtime.table_version(FLIGHTS) == 2
    assert monitor(project, runtime).action == NOOP
    assert len(runtime.read_table(QUALITY)) == 2

    page = (tmp_path / "report.html").read_text()
    assert "Measurements as labels arrived" in page and 'alt="Performance by label arrival"' in page


def test_spark_engine_matches_single_node(runtime, spark, project_dir, flights_sample, tmp_path, admitted):
    """One published run monitored by the Spark engine (``batch_compute: spark``) and by the
    single-node one, each into its own quality table: the same row, but for the approximate
    quantiles (a value of the data within the ranks percentile_approx allows)."""
    runtime.spark_session = spark
    waiting = flights_sample.assign(arr_delay=flights_sample["arr_delay"].where(flights_sample["month"] != 11))
    single = publish_project(runtime, project_dir, flights_sample, waiting, admitted)
    for name, change in (("inference.yml", {"batch_compute": "spark"}),
                         ("monitoring.yml", {"quality_table": "main.flights.late_arrival_quality_spark"})):
        path = project_dir / name
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **change}))
    on_spark = load_project(project_dir)
    assert on_spark.inference.batch_compute == "spark"
    found = monitor(on_spark, runtime, report=str(tmp_path / "spark.html")).row
    expected = monitor(single, runtime).row
    assert found["rows"] == 300 and found["labelled_rows"] > 50 and found["labels_digest"].startswith("v2:")
    for name, value in expected.items():
        if name in ("monitored_at", "prediction_distribution"):
            continue
        if isinstance(value, float):
            assert found[name] == pytest.approx(value, rel=1e-9, nan_ok=True), name
        else:
            assert found[name] == value, name
    spark_classes = json.loads(found["prediction_distribution"])["classes"]
    assert spark_classes == json.loads(expected["prediction_distribution"])["classes"]
    shown = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', (tmp_path / "spark.html").read_text())
    assert shown == ["Exclusion rate", "Drift", "Performance by label arrival", "Calibration", "Prediction histogram"]

    # November's delays arrive: both engines re-measure the run on label table version 1, alike
    arrived = flights_sample[flights_sample["month"] == 11][["flight_id", "arr_delay"]]
    DeltaTable(str(runtime.table_path(FLIGHTS))).merge(
        arrived, predicate="t.flight_id = s.flight_id", source_alias="s", target_alias="t",
    ).when_matched_update(updates={"arr_delay": "s.arr_delay"}).execute()
    again, again_single = monitor(on_spark, runtime), monitor(single, runtime)
    assert again.action == again_single.action == "appended 1 row(s) (1 re-measured on label table version 1)"
    assert again.row["labelled_rows"] == again_single.row["labelled_rows"] > found["labelled_rows"]
    assert again.row["labels_digest"] == again_single.row["labels_digest"] != found["labels_digest"]
    for metric in ("accuracy", "roc_auc", "log_loss"):
        assert again.row[metric] == pytest.approx(again_single.row[metric], rel=1e-9), metric
    assert monitor(on_spark, runtime).action == NOOP



def _set_monitoring(trained_set, predictions: str, quality: str, batch_compute: str):
    """The trained set's project publishing to ``main.flights.<predictions>`` with quality rows in
    ``main.flights.<quality>`` (``batch_compute`` decides the monitoring engine too)."""
    import dataclasses

    config, runtime, _ = trained_set
    project = load_project(config)
    inference = project.inference.model_copy(update={"prediction_table": f"main.flights.{predictions}",
                                                      "batch_compute": batch_compute})
    monitoring = project.monitoring.model_copy(update={"quality_table": f"main.flights.{quality}"})
    return dataclasses.replace(project, inference=inference, monitoring=monitoring), runtime


def test_a_model_set_is_monitored_per_output_and_says_what_it_does_not_measure(trained_set, tmp_path):
    project, runtime = _set_monitoring(trained_set, "set_monitored", "set_quality", "single_node")
    publish(project, runtime, score(project, runtime))
    row = monitor(project, runtime, report=str(tmp_path / "set.html")).row
    table = runtime.read_table(project.inference.prediction_table)
    scored = table[table["scoring_status"] == "predicted"]
    assert row["rows"] == len(table) == 60 and row["predicted"] == len(scored) < 60
    reasons = json.loads(row["exclusions_by_reason"])
    assert reasons == table[table["scoring_status"] == "excluded"]["exclusion_reason"].value_counts().to_dict()
    assert all(r == "ineligible:cancelled" or r.split(":")[1].split("/")[0] in ("delay_model", "minutes_model")
               for r in reasons)

    per = json.loads(row["output_distribution"])
    assert set(per) == {"delay_model", "minutes_model", "late_risk", "late_flag"}
    late = scored["delay_model_prediction"].astype(int)
    assert per["delay_model"]["classes"] == {str(k): v / len(scored) for k, v in late.value_counts().items()}
    assert per["delay_model"]["mean_probability"] == pytest.approx(scored["delay_model_probability"].mean(), rel=1e-12)
    for name, column in (("minutes_model", "minutes_model_prediction"), ("late_risk", "late_risk")):
        values = scored[column].to_numpy(dtype="float64")
        assert per[name]["prediction_quantiles"] == pytest.approx(
            {f"p{q}": float(np.percentile(values, q)) for q in (5, 25, 50, 75, 95)}, rel=1e-12), name
    flags = scored["late_flag"].astype(bool)
    assert per["late_flag"] == {"classes": {str(k): v / len(scored) for k, v in flags.value_counts().items()}}
    assert row["prediction_distribution"] == "{}" and np.isnan(row["mean_probability"])
    assert np.isfinite(row["prediction_psi"])  # the profiled delay_model_probability
    assert row["labelled_rows"] == 0 and np.isnan(row["rmse"])
    assert json.loads(row["not_monitored"])[0].startswith("performance (accuracy, roc_auc, log_loss, rmse, mae) "
                                                          "and calibration: monitoring.yml names one label_column")
    shown = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', (tmp_path / "set.html").read_text())
    assert "Prediction histogram" in shown and "Calibration" not in shown


@pytest.mark.spark
def test_a_model_set_is_monitored_alike_by_the_spark_engine(trained_set, spark):
    single, runtime = _set_monitoring(trained_set, "set_both", "set_both_quality", "single_node")
    on_spark, _ = _set_monitoring(trained_set, "set_both", "set_both_quality_spark", "spark")
    runtime.spark_session = spark
    publish(single, runtime, score(single, runtime))
    found, expected = monitor(on_spark, runtime).row, monitor(single, runtime).row
    for name in ("rows", "predicted", "exclusions_by_reason", "null_share", "not_monitored", "labelled_rows"):
        assert found[name] == expected[name], name
    assert found["prediction_psi"] == pytest.approx(expected["prediction_psi"], rel=1e-9)
    spark_per, pandas_per = json.loads(found["output_distribution"]), json.loads(expected["output_distribution"])
    assert set(spark_per) == set(pandas_per) == {"delay_model", "minutes_model", "late_risk", "late_flag"}
    for name in ("delay_model", "late_flag"):
        assert spark_per[name]["classes"] == pandas_per[name]["classes"], name
    assert spark_per["delay_model"]["mean_probability"] == pytest.approx(pandas_per["delay_model"]["mean_probability"],
                                                                          rel=1e-12)
    table = runtime.read_table(single.inference.prediction_table)
    values = np.sort(table[table["scoring_status"] == "predicted"]["late_risk"].to_numpy(dtype="float64"))
    for q, value in spark_per["late_risk"]["prediction_quantiles"].items():  # percentile_approx: a value of the data
        assert value in values and abs(np.searchsorted(values, value) - int(q[1:]) / 100 * (len(values) - 1)) <= 1, q


def _two_monitors_at_once(project, runtime):
    """Two ``lakescore monitor`` of ``project`` in two threads, both held just before their write
    to the quality table until the other is there too (so both decided on the same table);
    returns their actions."""
    import threading

    gate, actions, errors = threading.Barrier(2, timeout=120), [None, None], []
    quality = project.monitoring.quality_table

    def held(write):
        def call(name, *args, **kwargs):
            if name == quality:
                gate.wait()
            return write(name, *args, **kwargs)
        return call

    runtime.write_table, runtime.insert_new = held(runtime.write_table), held(runtime.insert_new)

    def one(i):
        try:
            actions[i] = monitor(project, runtime).action
        except Exception as err:  # noqa: BLE001  (shown by the assertion below)
            errors.append(err)
            gate.abort()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    del runtime.write_table, runtime.insert_new
    assert not errors, errors
    return actions


@pytest.mark.parametrize("batch_compute", ["single_node", pytest.param("spark", marks=pytest.mark.spark)])
def test_two_monitors_at_once_append_one_quality_row(runtime, project_dir, flights_sample, admitted, batch_compute,
                                                     request):
    """One quality row per (run, model version, label table version), however many monitors race,
    on both engines; each says what it did."""
    project = publish_project(runtime, project_dir, flights_sample, flights_sample, admitted)
    if batch_compute == "spark":
        runtime.spark_session = request.getfixturevalue("spark")
        path = project_dir / "inference.yml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "batch_compute": "spark"}))
        project = load_project(project_dir)
    actions = _two_monitors_at_once(project, runtime)
    from lakescore.workflows.monitor import RACED

    assert sorted(actions) == ["appended 1 row(s)", RACED]
    quality = runtime.read_table(QUALITY)
    assert len(quality) == 1 and quality["measurement"].tolist() == ["first"]
    assert monitor(project, runtime).action == NOOP
    if batch_compute == "spark":
        return  # the engines differ in the aggregates only; the re-measured row is written alike

    # the labels move: both re-measure on label table version 1, and one row of it lands
    DeltaTable(str(runtime.table_path(FLIGHTS))).update(predicate="month >= 10", updates={"arr_delay": "arr_delay + 30"})
    actions = _two_monitors_at_once(project, runtime)
    assert sorted(actions) == ["appended 1 row(s) (1 re-measured on label table version 1)", RACED]
    quality = runtime.read_table(QUALITY).sort_values("monitored_at")
    assert quality["label_table_version"].tolist() == [0, 1]
    assert quality["measurement"].tolist() == ["first", "labels_changed"]
