"""The route a run takes, chosen once from batch_compute and the placement; and what each route
counts where its rows are: how many source rows find no feature row (the demo's "no feature row"
lines), in pandas and in Spark alike."""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from lakescore.config import load_project
from lakescore.demo_data import INCOMING
from lakescore.errors import FeatureLookupError
from lakescore.lookup import FeatureLookup
from lakescore.packaging import log_and_register
from lakescore.publish.state import DeltaRsTarget
from lakescore.runtime import DatabricksRuntime
from lakescore.runtime.base import DeltaEngine
from lakescore.runtime.databricks import MlflowUris
from lakescore.workflows import publish as publish_workflow
from lakescore.workflows import score as score_workflow
from lakescore.workflows.routes import SingleNodeRoute, SparkRoute, choose_route
from lakescore.workflows.routes.writers import DeltaRsPublication, SparkDeltaPublication

SOURCE, PLANES, WEATHER = "main.t.rows", "main.t.planes", "main.t.weather"
MODEL = "main.flights.late_arrival"
PLANE = FeatureLookup(PLANES, ("tailnum",), ("seats",))
WEATHER_AT = FeatureLookup(WEATHER, ("origin",), ("temp",), timestamp_lookup_key="time_hour")


def _kinds(route) -> tuple:
    """What a route is: its class, name, publication engine, writer, and whether it can decide a
    replay no-op before a session starts."""
    return (type(route), route.name, route.engine, type(route.writer()),
            type(route.early_target(SOURCE, app_id="job")))


def test_each_batch_compute_gets_its_route_with_the_local_placements_engine(runtime) -> None:
    assert _kinds(choose_route(runtime, "single_node")) == (
        SingleNodeRoute, "single_node", DeltaEngine.DELTA_RS, DeltaRsPublication, type(None))
    assert _kinds(choose_route(runtime, "spark")) == (
        SparkRoute, "spark", DeltaEngine.SPARK_DELTA, SparkDeltaPublication, DeltaRsTarget)
    with pytest.raises(ValueError, match="batch_compute 'gpu' is not a route"):
        choose_route(runtime, "gpu")  # type: ignore[arg-type]


@pytest.mark.spark
def test_on_databricks_both_routes_publish_with_spark_delta_and_decide_nothing_early(spark, tmp_path: Path,
                                                                                   migrated_mlflow) -> None:
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    dbx = DatabricksRuntime(tmp_path / "lakescore", target="staging", uris=MlflowUris(db, db), session=spark)
    assert _kinds(choose_route(dbx, "single_node")) == (
        SingleNodeRoute, "single_node", DeltaEngine.SPARK_DELTA, SparkDeltaPublication, type(None))
    assert _kinds(choose_route(dbx, "spark")) == (
        SparkRoute, "spark", DeltaEngine.SPARK_DELTA, SparkDeltaPublication, type(None))


def _counted(monkeypatch: pytest.MonkeyPatch, module) -> list[str]:
    """The batch_compute of every route ``module`` chooses (the real choice, recorded)."""
    calls: list[str] = []
    real = module.choose_route

    def choose(runtime, batch_compute):
        calls.append(batch_compute)
        return real(runtime, batch_compute)

    monkeypatch.setattr(module, "choose_route", choose)
    return calls


@pytest.fixture
def ten_flights(runtime, project_dir, flights_sample, small_chain, small_evidence):
    """Ten flights as the score source and the small chain registered: a project on each route."""
    ten = flights_sample.head(10).reset_index(drop=True)
    runtime.write_table(INCOMING, ten, mode="error", configuration={"delta.enableChangeDataFeed": "true"})
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=MODEL, alias="champion",
                         evidence=small_evidence)
    project = load_project(project_dir)

    def on(batch_compute: str):
        return dataclasses.replace(project, inference=project.inference.model_copy(
            update={"batch_compute": batch_compute}))

    return on, sorted(int(k) for k in ten["flight_id"])


def test_a_single_node_run_chooses_its_route_once_and_its_run_says_so(ten_flights, runtime, monkeypatch) -> None:
    on, keys = ten_flights
    chosen, published = _counted(monkeypatch, score_workflow), _counted(monkeypatch, publish_workflow)
    run = score_workflow.score(on("single_node"), runtime)
    assert chosen == ["single_node"]  # once, for every step of the run
    assert (run.batch_compute, run.frame, sorted(run.predictions["flight_id"])) == ("single_node", "pandas", keys)
    assert (runtime.runs_dir() / run.run_id / "predictions.parquet").is_file()
    assert publish_workflow.publish(on("single_node"), runtime, run).engine == "delta-rs"
    assert published == ["single_node"]
    staged = score_workflow.load_scored(runtime, run.run_id)
    assert (staged.batch_compute, staged.frame, staged.counts) == ("single_node", "pandas", run.counts)


@pytest.mark.spark
def test_a_spark_run_chooses_its_route_once_and_its_run_says_so(ten_flights, spark_runtime, monkeypatch) -> None:
    on, keys = ten_flights
    runtime = spark_runtime
    chosen, published = _counted(monkeypatch, score_workflow), _counted(monkeypatch, publish_workflow)
    run = score_workflow.score(on("spark"), runtime)
    assert chosen == ["spark"]
    assert (run.batch_compute, run.frame) == ("spark", "spark")
    assert sorted(r["flight_id"] for r in run.predictions.select("flight_id").collect()) == keys
    assert (runtime.runs_dir() / run.run_id / "predictions").is_dir()
    assert publish_workflow.publish(on("spark"), runtime, run).engine == "spark-delta"
    assert published == ["spark"]
    assert score_workflow.load_scored(runtime, run.run_id).frame == "spark"  # the staged run's route, read back
    chosen.clear()
    replay = score_workflow.score(on("spark"), runtime)  # nothing new: a no-op, decided before scoring
    assert chosen == ["spark"]
    assert (replay.batch_compute, replay.frame, replay.counts["rows_in"]) == ("spark", "pandas", 0)
    assert publish_workflow.publish(on("spark"), runtime, replay).action == "noop"


def _tables(runtime) -> None:
    at = pd.to_datetime(["2013-01-01 10:00", "2013-01-01 08:00", "2013-01-01 12:00", "2013-01-01 10:00", None],
                        utc=True)
    runtime.write_table(SOURCE, pd.DataFrame({"tailnum": ["A", "B", None, "C", "A"],
                                              "origin": ["X", "X", "Y", None, "X"], "time_hour": at}))
    runtime.write_table(PLANES, pd.DataFrame({"tailnum": ["A", "C", "D"], "seats": [100, 150, 200]}))
    runtime.write_table(WEATHER, pd.DataFrame({"origin": ["X", "X", "Z"], "temp": [1.0, 2.0, 3.0],
                                               "time_hour": pd.to_datetime(["2013-01-01 09:00", "2013-01-01 11:00",
                                                                            "2013-01-01 01:00"], utc=True)}))


# worked by hand: planes misses B and the null tailnum (2 of 5); weather matches only (X, 10:00),
# since X's first observation is 09:00, Y has none, and a null origin or time matches nothing (4 of 5)
EXPECTED = {f"{PLANES} by tailnum": 2, f"{WEATHER} by origin, time_hour": 4}


def test_rows_without_a_feature_row_are_counted_in_pandas(runtime) -> None:
    _tables(runtime)
    assert choose_route(runtime, "single_node").unmatched_rows(
        SOURCE, [PLANE, WEATHER_AT], version=0, versions={PLANES: 0, WEATHER: 0}) == EXPECTED


@pytest.mark.spark
def test_rows_without_a_feature_row_are_counted_in_spark_as_in_pandas(spark_runtime) -> None:
    _tables(spark_runtime)
    assert choose_route(spark_runtime, "spark").unmatched_rows(
        SOURCE, [PLANE, WEATHER_AT], version=0, versions={PLANES: 0, WEATHER: 0}) == EXPECTED


def test_a_naive_feature_time_against_utc_rows_is_refused_as_the_join_refuses_it(runtime) -> None:
    """Rows with UTC times against a feature table with naive times: which zone the naive times
    are in is unknown, so the count refuses, as :func:`lakescore.lookup.join_features` does."""
    _tables(runtime)
    naive = pd.DataFrame({"origin": ["X", "X", "Z"], "temp": [1.0, 2.0, 3.0],
                          "time_hour": pd.to_datetime(["2013-01-01 09:00", "2013-01-01 11:00", "2013-01-01 01:00"])})
    runtime.write_table("main.t.weather_naive", naive)
    spec = FeatureLookup("main.t.weather_naive", ("origin",), ("temp",), timestamp_lookup_key="time_hour")
    with pytest.raises(FeatureLookupError, match=r"main\.t\.weather_naive: the rows' 'time_hour' carries a time zone "
                                                 r"and feature table column 'time_hour' does not"):
        choose_route(runtime, "single_node").unmatched_rows(
            SOURCE, [spec], version=0, versions={"main.t.weather_naive": 0})


DAILY = FeatureLookup("main.t.daily", ("origin",), ("temp",), timestamp_lookup_key="time_hour",
                      feature_timestamp_key="day")


def _daily(runtime) -> None:
    """A Delta ``date`` feature time: X from Jan 1, Y from Jan 2 (the rows are all on Jan 1, UTC)."""
    runtime.write_table("main.t.daily", pd.DataFrame({"origin": ["X", "Y"], "temp": [1.0, 2.0],
                                                      "day": [date(2013, 1, 1), date(2013, 1, 2)]}))


# worked by hand: the two X rows with a time (10:00, 08:00 UTC) match X's Jan 1 (its midnight UTC is before);
# Y's first day is Jan 2, after its Jan 1 12:00 row; the null origin and X's null time match nothing (3 of 5)
DAILY_EXPECTED = {"main.t.daily by origin, time_hour": 3}


def test_a_date_feature_time_is_counted_as_midnight_utc_against_utc_rows(runtime) -> None:
    _tables(runtime)
    _daily(runtime)
    assert choose_route(runtime, "single_node").unmatched_rows(
        SOURCE, [DAILY], version=0, versions={"main.t.daily": 0}) == DAILY_EXPECTED


@pytest.mark.spark
def test_a_date_feature_time_is_counted_in_spark_as_in_pandas(spark_runtime) -> None:
    _tables(spark_runtime)
    _daily(spark_runtime)
    assert choose_route(spark_runtime, "spark").unmatched_rows(
        SOURCE, [DAILY], version=0, versions={"main.t.daily": 0}) == DAILY_EXPECTED
