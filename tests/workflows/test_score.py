"""The score workflow reads exactly the source's Delta snapshot on both routes: a deletion vector
that hides 2 of 10 rows hides them from scoring and from the published predictions."""

import dataclasses

import mlflow
import pytest
from fixtures.runs import as_pandas
from fixtures.spark_delta import write_spark_delta

from lakescore.admission.evidence import admit
from lakescore.config import load_project
from lakescore.demo_data import INCOMING
from lakescore.packaging import log_and_register
from lakescore.runtime.local_spark import CONNECT_MODE_ENV
from lakescore.workflows.publish import publish
from lakescore.workflows.score import score

pytestmark = pytest.mark.spark
NAME = "main.flights.late_arrival"


@pytest.fixture
def dv_project(spark_runtime, project_dir, flights_sample, small_chain, small_evidence):
    """Ten real flights as a Spark Delta source whose v1 deletes two of them through a deletion vector."""
    ten = flights_sample.head(10)
    deleted = [int(ten["flight_id"].iloc[2]), int(ten["flight_id"].iloc[6])]
    write_spark_delta(spark_runtime.spark(), spark_runtime.table_path(INCOMING), ten,
                      properties={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
                      delete=f"flight_id IN ({deleted[0]}, {deleted[1]})")
    spark_runtime.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=small_evidence)
    kept = sorted(int(k) for k in ten["flight_id"] if int(k) not in deleted)
    return load_project(project_dir), spark_runtime, ten, kept


def test_deleted_rows_are_neither_scored_nor_published_on_either_route(dv_project, small_chain):
    project, runtime, ten, kept = dv_project
    assert project.inference.batch_compute == "spark"
    on_spark = score(project, runtime)
    assert on_spark.plan.source_version == 1 and on_spark.counts["rows_in"] == 8
    spark_rows = as_pandas(on_spark.predictions)
    assert spark_rows["flight_id"].tolist() == kept

    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    on_one_node = score(single, runtime)
    assert on_one_node.predictions["flight_id"].tolist() == kept
    assert on_one_node.predictions["prediction"].equals(spark_rows["prediction"])
    rows = ten.set_index("flight_id").loc[kept].reset_index()  # independent: the chain on the kept rows
    assert spark_rows["prediction"].tolist() == small_chain.predict(rows)["prediction"].tolist()

    publish(project, runtime, on_spark)
    stored = runtime.read_table(project.inference.prediction_table)
    assert sorted(stored["flight_id"]) == kept


@pytest.mark.connect
def test_the_spark_route_scores_stages_and_publishes_on_spark_connect(dv_project, spark_connect, monkeypatch):
    project, runtime, _, kept = dv_project
    monkeypatch.setenv(CONNECT_MODE_ENV, "1")  # as LAKESCORE_SPARK_CONNECT=1 sets it: Connect columns
    runtime.spark_session = spark_connect
    run = score(project, runtime)  # preflight, scope, spark_udf, staging from the executors
    assert run.counts["rows_in"] == 8 and sorted(as_pandas(run.predictions)["flight_id"]) == kept
    assert not list((runtime.runs_dir() / "models").glob("*/*"))  # the run's model copy is gone once staged
    result = publish(project, runtime, run)
    assert (result.action, result.engine, result.table_version) == ("append", "spark-delta", 0)
    assert sorted(runtime.read_table(project.inference.prediction_table)["flight_id"]) == kept


PLANES = "main.flights.planes"
WEATHER = "main.flights.weather"


@pytest.fixture(scope="module")
def lookup_chain(flights_sample, demo_tables):
    """A chain trained with two lookups (weather point in time, planes by tailnum, v0: every other
    plane) and admitted, once for the module: ``(chain, evidence, joined rows, weather, planes)``."""
    from lakescore.frames import derive_label
    from lakescore.lookup import FeatureLookup, join_all
    from lakescore.training import ChainRecipe, fit_chain

    weather = demo_tables[WEATHER].drop_duplicates(["origin", "time_hour"])[["origin", "time_hour", "temp"]]
    planes = demo_tables[PLANES][["tailnum", "year"]]
    specs = (FeatureLookup(WEATHER, ("origin",), ("temp",), timestamp_lookup_key="time_hour"),
             FeatureLookup(PLANES, ("tailnum",), ("year",), (("year", "plane_year"),)))
    joined = join_all(flights_sample, {WEATHER: weather, PLANES: planes.iloc[::2]}, specs)
    recipe = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "temp", "plane_year"],
               "strategy": "median"},
              {"step": "StandardScaler", "name": "scale", "columns": ["dep_delay", "temp", "plane_year"]}]
    chain = fit_chain(joined, derive_label(joined, column="is_late", expression="arr_delay > 15"),
                      ChainRecipe(steps=recipe, model_class="LogisticRegression", model_params={"max_iter": 300},
                                  feature_columns=["dep_delay", "temp", "plane_year"]))
    chain = dataclasses.replace(chain, lookups=specs, lookup_versions=(0, 0))
    return chain, admit(chain, joined.iloc[1500:]), joined, weather, planes


@pytest.fixture
def lookup_project(runtime, project_dir, flights_sample, lookup_chain):
    """:func:`lookup_chain` registered, its feature tables at v0, 40 incoming flights, and planes v1
    that adds the plane rows v0 lacked."""
    chain, evidence, joined, weather, planes = lookup_chain
    runtime.write_table(WEATHER, weather)
    runtime.write_table(PLANES, planes.iloc[::2].reset_index(drop=True))
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=joined.head(5), name=NAME, alias="champion", evidence=evidence)
    incoming = flights_sample.iloc[:40]
    runtime.write_table(INCOMING, incoming)
    runtime.write_table(PLANES, planes.iloc[1::2].reset_index(drop=True), mode="append")  # v1: the rest
    project = load_project(project_dir)
    single = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "single_node"}))
    return single, runtime, chain, incoming, {WEATHER: weather, PLANES: planes}


def test_the_single_node_route_joins_the_current_feature_tables_and_the_receipt_names_them(lookup_project):
    from lakescore.lookup import join_all
    from lakescore.workflows.publish import list_receipts

    project, runtime, chain, incoming, current = lookup_project
    run = score(project, runtime)
    assert run.plan.feature_tables == {WEATHER: 0, PLANES: 1}  # planes at its current version, not training's 0
    assert run.summary()["feature_lookups"] == [{"table": WEATHER, "version": 0}, {"table": PLANES, "version": 1}]
    # independent: the rows joined by hand with every plane row (v0 + v1), then the chain in memory
    expected = chain.predict(join_all(incoming, current, chain.lookups)).assign(flight_id=incoming["flight_id"].values)
    got = run.predictions.set_index("flight_id")
    expected = expected.set_index("flight_id").loc[got.index]
    assert len(got) == 40 and got["scoring_status"].eq("predicted").all()
    assert got["probability"].to_numpy() == pytest.approx(expected["probability"].to_numpy(dtype="float64"), abs=1e-12)
    publish(project, runtime, run)
    receipt = list_receipts(runtime, project.inference.prediction_table)["receipts"][0]
    assert receipt["feature_lookups"] == [{"table": WEATHER, "version": 0}, {"table": PLANES, "version": 1}]


def test_the_spark_route_joins_the_feature_tables_in_spark_and_scores_as_the_single_node_route(lookup_project,
                                                                                               spark_runtime):
    from lakescore.lookup import join_all
    from lakescore.workflows.publish import list_receipts

    project, runtime, chain, incoming, current = lookup_project
    assert runtime is spark_runtime
    on_one_node = score(project, runtime)
    on_spark = dataclasses.replace(project, inference=project.inference.model_copy(update={"batch_compute": "spark"}))
    run = score(on_spark, runtime)
    assert run.batch_compute == "spark" and run.plan.feature_tables == {WEATHER: 0, PLANES: 1}
    assert run.summary()["feature_lookups"] == [{"table": WEATHER, "version": 0}, {"table": PLANES, "version": 1}]
    got = as_pandas(run.predictions).set_index("flight_id").sort_index()
    single = on_one_node.predictions.set_index("flight_id").loc[got.index]
    assert len(got) == 40 and got["scoring_status"].eq("predicted").all()
    assert got["prediction"].tolist() == single["prediction"].tolist()
    assert got["probability"].to_numpy() == pytest.approx(single["probability"].to_numpy(dtype="float64"), abs=1e-12)
    # independent: the rows joined by hand in pandas with every plane row (v0 + v1), then the chain in memory
    expected = chain.predict(join_all(incoming, current, chain.lookups)).assign(flight_id=incoming["flight_id"].values)
    expected = expected.set_index("flight_id").loc[got.index]
    assert got["probability"].to_numpy() == pytest.approx(expected["probability"].to_numpy(dtype="float64"), abs=1e-12)
    publish(on_spark, runtime, run)
    receipt = list_receipts(runtime, project.inference.prediction_table)["receipts"][0]
    assert receipt["feature_lookups"] == [{"table": WEATHER, "version": 0}, {"table": PLANES, "version": 1}]


def _set_project(trained_set, table: str, batch_compute: str):
    config, runtime, result = trained_set
    project = load_project(config)
    update = {"prediction_table": table, "batch_compute": batch_compute}
    return dataclasses.replace(project, inference=project.inference.model_copy(update=update)), runtime, result


def _by_hand(runtime, result, incoming):
    """Independent of the set's own predict: each registered component chain on its own, composed by hand."""
    from lakescore.chain import FittedChain

    folder = mlflow.artifacts.download_artifacts(f"models:/{result.model_name}/{result.version}/artifacts/chain")
    delay = FittedChain.load(f"{folder}/components/delay_model").predict(incoming)
    minutes = FittedChain.load(f"{folder}/components/minutes_model").predict(incoming)
    both = ((delay["scoring_status"] == "predicted") & (minutes["scoring_status"] == "predicted")).to_numpy()
    p, m = delay["probability"].to_numpy(dtype="float64"), minutes["prediction"].to_numpy(dtype="float64")
    return both, p, m


def test_a_model_set_scores_on_one_node_and_publishes_every_output_in_one_commit(trained_set, flights_sample):
    from lakescore.workflows.publish import list_receipts

    project, runtime, result = _set_project(trained_set, "main.flights.set_predictions", "single_node")
    run = score(project, runtime)
    got = run.predictions.set_index("flight_id")
    incoming = flights_sample.iloc[1900:1960]
    both, p, m = _by_hand(runtime, result, incoming)
    got = got.loc[incoming["flight_id"]]
    assert len(got) == 60 and 0 < (~both).sum() and got["scoring_status"].eq("predicted").to_numpy().tolist() == both.tolist()
    assert got["late_risk"][both].to_numpy(dtype="float64") == pytest.approx(0.7 * p[both] + 0.3 * m[both], abs=1e-12)
    assert got["late_flag"][both].tolist() == ((p[both] >= 0.5) | (m[both] >= 30)).tolist()
    assert run.summary()["components"] == ["delay_model", "minutes_model"]
    published = publish(project, runtime, run)
    table = project.inference.prediction_table
    version = published.table_version
    assert published.action == "append" and runtime.table_version(table) == version
    assert len(runtime.read_table(table, version=version - 1)) == 0  # every output arrived in this one commit
    stored = runtime.read_table(table, version=version)
    assert len(stored) == 60 and {"delay_model_probability", "minutes_model_prediction", "late_risk", "late_flag",
                                  "scoring_status", "exclusion_reason"} <= set(stored.columns)
    receipt = list_receipts(runtime, table)["receipts"][0]
    assert (receipt["model_version"], receipt["table_version"]) == (result.version, version)
    assert receipt["components"] == result.components  # each component's version (digest) inside the set's
    assert receipt["decision_threshold"].startswith("delay_model: threshold 0.4")


def test_a_model_set_scores_on_spark_as_on_one_node(trained_set, flights_sample, spark):
    project, runtime, result = _set_project(trained_set, "main.flights.set_predictions_spark", "spark")
    runtime.spark_session = spark
    run = score(project, runtime)
    got = as_pandas(run.predictions).set_index("flight_id").loc[flights_sample.iloc[1900:1960]["flight_id"]]
    both, p, m = _by_hand(runtime, result, flights_sample.iloc[1900:1960])
    assert got["scoring_status"].eq("predicted").to_numpy().tolist() == both.tolist()
    assert got["late_risk"][both].to_numpy(dtype="float64") == pytest.approx(0.7 * p[both] + 0.3 * m[both], abs=1e-12)
    assert got["late_flag"][both].tolist() == ((p[both] >= 0.5) | (m[both] >= 30)).tolist()
    assert got["exclusion_reason"][~both].str.contains("delay_model/|minutes_model/|ineligible:").all()
    published = publish(project, runtime, run)
    assert published.engine == "spark-delta" and runtime.table_version(project.inference.prediction_table) == \
        published.table_version
    assert published.receipt["components"] == result.components
