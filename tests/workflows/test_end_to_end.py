"""The main job end to end on a 20,000-flight slice: train -> score on Spark -> publish ->
publish again -> monitor, with the Spark route checked row by row against the single-node route."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from fixtures.configs import without_feature_lookups
from fixtures.runs import as_pandas

from lakescore.config import load_project
from lakescore.demo_data import FLIGHTS, INCOMING
from lakescore.frames import floats_close
from lakescore.packaging import read_certificate
from lakescore.workflows.monitor import monitor
from lakescore.workflows.publish import publish
from lakescore.workflows.score import score
from lakescore.workflows.train import train

pytestmark = [pytest.mark.spark, pytest.mark.long]


@pytest.fixture
def slice_project(spark_runtime, project_dir, demo_tables, lookup_tables):
    flights = demo_tables[FLIGHTS].sample(20000, random_state=7).sort_values("flight_id", ignore_index=True)
    spark_runtime.write_table(FLIGHTS, flights)
    spark_runtime.write_table(INCOMING, flights[flights["month"] >= 10].reset_index(drop=True))
    lookup_tables(spark_runtime)  # config/training.yml's feature tables
    return load_project(project_dir), spark_runtime, flights


def test_train_score_publish_replay_monitor(slice_project):
    project, runtime, flights = slice_project
    incoming = flights[flights["month"] >= 10]
    trained = train(project, runtime)
    assert trained.version == 1 and trained.metrics["roc_auc"] > 0.8
    certificate = read_certificate(f"models:/{trained.model_name}/1")  # the demo model passes every check
    assert certificate.evidence["evidence_version"] == 2 and all(certificate.evidence["parts"].values())

    on_spark = score(project, runtime)
    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    on_one_node = score(single, runtime)
    assert on_spark.on_spark and not on_one_node.on_spark  # a Spark DataFrame over the staged files
    a, b = as_pandas(on_spark.predictions), on_one_node.predictions
    assert len(a) == len(b) == len(incoming)
    assert a["flight_id"].tolist() == b["flight_id"].tolist() == sorted(incoming["flight_id"])
    assert a["prediction"].equals(b["prediction"])
    assert floats_close(a["probability"].astype("float64"), b["probability"].astype("float64")).all()
    assert a["scoring_status"].equals(b["scoring_status"]) and a["exclusion_reason"].equals(b["exclusion_reason"])
    assert a["risk_band"].equals(b["risk_band"])  # the demo's output rule, through the struct result
    p = a["probability"].to_numpy(dtype="float64", na_value=np.nan)
    expected_band = np.where(p >= 0.5, "high", np.where(p >= 0.2, "medium", "low"))
    predicted_rows = (a["scoring_status"] == "predicted").to_numpy()
    assert (a["risk_band"][predicted_rows].to_numpy() == expected_band[predicted_rows]).all()
    assert a["risk_band"][~predicted_rows].isna().all()

    # excluded rows: null prediction and probability, a reason (a SQL null reason is never text)
    excluded = a[a["scoring_status"] == "excluded"]
    cancelled = incoming.loc[incoming["dep_time"].isna(), "flight_id"]
    assert set(cancelled) <= set(excluded["flight_id"]) and len(cancelled) > 0
    assert excluded["prediction"].isna().all() and excluded["probability"].isna().all()
    assert excluded["exclusion_reason"].notna().all()
    assert set(excluded["exclusion_reason"]) <= {"ineligible:cancelled", "outlier:distance_outlier"}
    predicted = a[a["scoring_status"] == "predicted"]
    assert predicted["exclusion_reason"].isna().all() and predicted["prediction"].isin([0, 1]).all()
    assert not a["exclusion_reason"].isin(["None", "<NA>", "nan"]).any()

    first = publish(project, runtime, on_spark)
    table = project.inference.prediction_table
    assert first.action == "append" and runtime.table_version(table) == 0  # Spark's commit creates the table
    stored = runtime.read_table(table)
    assert len(stored) == len(incoming) and stored["flight_id"].is_unique
    assert stored["exclusion_reason"].isna().sum() == len(predicted)
    assert first.receipt["source_version_to"] == runtime.table_version(INCOMING)
    assert first.receipt["rows_in"] == len(incoming) and first.receipt["excluded"] == len(excluded)

    again = publish(project, runtime, on_one_node)
    assert again.action == "noop" and again.message.startswith("replay: no-op")
    assert runtime.table_version(table) == 0 and len(runtime.read_table(table)) == len(incoming)

    quality = monitor(project, runtime).row
    assert quality["rows"] == len(incoming) and quality["excluded"] == len(excluded)
    assert quality["exclusion_rate"] == pytest.approx(len(excluded) / len(incoming))
    labelled = predicted.merge(incoming[["flight_id", "arr_delay"]], on="flight_id").dropna(subset=["arr_delay"])
    truth = (labelled["arr_delay"] > 15).astype(int).to_numpy()
    assert quality["labelled_rows"] == len(labelled)
    assert quality["accuracy"] == pytest.approx(float(np.mean(truth == labelled["prediction"].to_numpy(dtype=int))))


def test_a_missing_source_table_fails_before_any_work(slice_project):
    project, runtime, _ = slice_project
    bad = dataclasses.replace(project, inference=project.inference.model_copy(
        update={"score_source_table": "main.flights.nope"}))
    from lakescore.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        score(bad, runtime)
    text = str(err.value)
    assert "config/inference.yml: score_source_table 'main.flights.nope'" in text
    assert "has no alias 'champion'" in text  # nothing trained yet: both problems in one message
    assert not runtime.table_exists(project.inference.prediction_table)


def _serving_helpers():
    """tests/serving/serving_helpers.py (a real ``lakescore serve`` process and its client)."""
    import importlib.util
    import sys
    from pathlib import Path

    if "serving_helpers" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "serving" / "serving_helpers.py"
        spec = importlib.util.spec_from_file_location("serving_helpers", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["serving_helpers"] = module
        spec.loader.exec_module(module)
    return sys.modules["serving_helpers"]


def test_a_random_forest_trains_scores_on_both_routes_and_serves_the_same_answers(spark_runtime, project_dir,
                                                                                  demo_tables):
    """A scikit-learn tree model end to end on a 3,000-flight slice: its fingerprint must survive
    registration, Spark workers, the single-node pyfunc and a warm endpoint replica."""
    import yaml

    helpers = _serving_helpers()
    runtime = spark_runtime
    flights = demo_tables[FLIGHTS].iloc[::110].head(3000).sort_values("flight_id", ignore_index=True)
    runtime.write_table(FLIGHTS, flights)
    incoming = flights[flights["month"] >= 10].head(300).reset_index(drop=True)
    runtime.write_table(INCOMING, incoming)
    # requests carry the plain recipe's columns (serving a lookup model: tests/serving/test_serving_lookup.py)
    without_feature_lookups(project_dir)
    training = yaml.safe_load((project_dir / "training.yml").read_text())
    training["model"] = {"class": "RandomForestClassifier", "params": {"n_estimators": 8, "max_depth": 6}}
    (project_dir / "training.yml").write_text(yaml.safe_dump(training))
    project = load_project(project_dir)

    trained = train(project, runtime)
    assert trained.version == 1 and 0.5 < trained.metrics["roc_auc"] <= 1.0
    on_spark = as_pandas(score(project, runtime).predictions)
    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    on_one_node = score(single, runtime).predictions
    assert on_spark["flight_id"].tolist() == on_one_node["flight_id"].tolist() == sorted(incoming["flight_id"])
    for column in ("prediction", "scoring_status", "exclusion_reason", "risk_band"):
        assert on_spark[column].equals(on_one_node[column]), column
    assert floats_close(on_spark["probability"].astype("float64"), on_one_node["probability"].astype("float64")).all()
    predicted = on_spark["scoring_status"] == "predicted"
    assert predicted.sum() > 200 and set(on_spark.loc[predicted, "prediction"]) <= {0, 1}
    # an 8-tree forest's probability is a mean of leaf frequencies: a value in [0, 1], never null when predicted
    p = on_spark.loc[predicted, "probability"].astype("float64")
    assert p.between(0, 1).all() and p.nunique() > 5

    endpoint = helpers.launch(runtime.home, project_dir, endpoint_name="forest", scale_interval_s=1,
                              record_flush_interval_s=1)
    try:
        endpoint.wait_for(lambda s: bool(helpers.ready_replicas(s)), what="a ready replica")
        rows = incoming.head(40)
        resp = endpoint.score(helpers.records(rows, helpers.chain_of(runtime, 1).input_columns))
        assert resp.status_code == 200, resp.text[:500]
        served = resp.json()["predictions"]
    finally:
        endpoint.stop()
    batch = on_one_node.set_index("flight_id").loc[rows["flight_id"]]
    want = [{"prediction": None if pd.isna(r.prediction) else int(r.prediction),
             "probability": None if pd.isna(r.probability) else float(r.probability),
             "scoring_status": r.scoring_status,
             "exclusion_reason": None if pd.isna(r.exclusion_reason) else r.exclusion_reason}
            for r in batch.itertuples()]
    helpers.assert_same_answers(served, want)
