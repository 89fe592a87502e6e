"""The Spark route end to end on Spark Delta: a ``batch_compute: spark`` run is scored lazily,
staged by the executors under the run store, and committed through the Spark Delta writer with
its app transaction and receipt; a replay is a no-op; a change feed window is read on Spark and an
update in it follows ``source_change_policy``; a vacuumed window requires recovery."""

import json

import mlflow
import pandas as pd
import pytest
import yaml
from chispa import assert_df_equality
from deltalake import DeltaTable
from fixtures.runs import as_pandas

from lakescore.config import load_project
from lakescore.demo_data import INCOMING
from lakescore.errors import CdfRecoveryRequiredError, SourceChangedError
from lakescore.packaging import log_and_register
from lakescore.publish.plan import app_id_for
from lakescore.scoring.preflight import preflight
from lakescore.workflows.publish import publish
from lakescore.workflows.score import load_scored, noop_before_spark, score

pytestmark = pytest.mark.spark
NAME = "main.flights.late_arrival"


class SparkLake:
    """A registered model and a CDF-enabled source of real flights, scored on the Spark route."""

    def __init__(self, runtime, project_dir, flights):
        self.runtime, self.project_dir, self.flights = runtime, project_dir, flights.reset_index(drop=True)

    @property
    def project(self):
        return load_project(self.project_dir)

    def configure(self, **publication):
        path = self.project_dir / "inference.yml"
        body = yaml.safe_load(path.read_text())
        body["publication"] = {**body.get("publication", {}), **publication}
        path.write_text(yaml.safe_dump(body))

    def add(self, rows: pd.DataFrame) -> None:
        mode = "append" if self.runtime.table_exists(INCOMING) else "error"
        self.runtime.write_table(INCOMING, rows.reset_index(drop=True), mode=mode,
                                 **({} if mode == "append" else {"configuration": {"delta.enableChangeDataFeed": "true"}}))

    @property
    def target(self) -> str:
        return self.project.inference.prediction_table


def registered_lake(runtime, project_dir, flights_sample, small_chain, small_evidence) -> SparkLake:
    """The model registered in ``runtime``'s registry, and the lake of four cancelled flights
    (excluded by the `cancelled` eligibility rule) then 86 others."""
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(small_chain, example=flights_sample.head(5), name=NAME, alias="champion",
                         evidence=small_evidence)
    cancelled = flights_sample["dep_time"].isna()
    flights = pd.concat([flights_sample[cancelled].head(4), flights_sample[~cancelled].head(86)])
    lake = SparkLake(runtime, project_dir, flights)
    assert lake.project.inference.batch_compute == "spark"
    return lake


@pytest.fixture
def spark_lake(spark_runtime, project_dir, flights_sample, small_chain, small_evidence):
    return registered_lake(spark_runtime, project_dir, flights_sample, small_chain, small_evidence)


@pytest.fixture
def route_lake(route_runtime, project_dir, flights_sample, small_chain, small_evidence):
    """The lake on classic Spark and again on Spark Connect (see ``route_spark``)."""
    return registered_lake(route_runtime, project_dir, flights_sample, small_chain, small_evidence)


def spark_refused(*args, **kwargs):
    raise AssertionError("a Spark session was asked for")


def test_a_spark_run_is_staged_by_the_executors_committed_by_spark_delta_and_replayed_as_a_noop(spark_lake, spark,
                                                                                                small_chain, monkeypatch):
    lake, runtime = spark_lake, spark_lake.runtime
    lake.add(lake.flights.iloc[:60])
    run = score(lake.project, runtime)
    folder = runtime.runs_dir() / run.run_id
    assert run.on_spark and (folder / "predictions").is_dir() and not (folder / "predictions.parquet").exists()
    assert list((folder / "predictions").glob("*.parquet")) and (folder / "run.json").exists()
    # the counts are the tally of the staged rows, against the chain run here on the same rows
    want = small_chain.predict(lake.flights.iloc[:60])
    assert run.counts == {"rows_in": 60, "predicted": int((want["scoring_status"] == "predicted").sum()),
                          "excluded": int((want["scoring_status"] == "excluded").sum())}
    assert run.counts["excluded"] > 0 and run.summary()["exclusions"] == \
        want["exclusion_reason"].value_counts().to_dict()
    staged = load_scored(runtime, run.run_id)
    assert staged.on_spark and staged.counts == run.counts
    assert_df_equality(staged.predictions, run.predictions, ignore_row_order=True)
    rows = as_pandas(staged.predictions)
    assert rows.columns[-2:].tolist() == ["model_name", "model_version"]
    assert set(rows["model_name"]) == {NAME} and set(rows["model_version"]) == {1}
    expected = pd.concat([lake.flights.iloc[:60][["flight_id"]].reset_index(drop=True), want], axis=1)
    assert rows["prediction"].tolist() == as_pandas(expected)["prediction"].tolist()

    first = publish(lake.project, runtime, staged)
    assert (first.action, first.engine, first.table_version) == ("append", "spark-delta", 0)  # the commit creates the table
    assert first.receipt["batch_compute"] == "spark" and first.receipt["rows_in"] == 60
    path = runtime.table_location(lake.target)
    app_id = app_id_for(lake.project.inference.job_name, runtime.target, lake.target)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("version = 0").first()
    assert history["operation"] == "WRITE"  # the Spark Delta writer's commit, not delta-rs's
    assert "Apache-Spark" in history["engineInfo"] and json.loads(history["userMetadata"])["run_id"] == run.run_id
    assert DeltaTable(path).transaction_version(app_id) == 0  # txnAppId / txnVersion
    stored = runtime.read_table(lake.target).sort_values("flight_id", ignore_index=True)
    assert stored["flight_id"].tolist() == sorted(lake.flights.iloc[:60]["flight_id"]) and set(stored["run_id"]) == {run.run_id}

    again = publish(lake.project, runtime, staged)  # the same run published twice
    assert (again.action, again.table_version) == ("noop", 0) and again.message.startswith("replay: no-op")
    with monkeypatch.context() as patch:  # no new source version: a no-op, decided before any Spark session
        patch.setattr(runtime, "spark", spark_refused)
        rescored = score(lake.project, runtime)
        assert rescored.scope["action"] == "noop" and rescored.scope["reason"].startswith("replay: no-op")
        assert rescored.counts["rows_in"] == 0 and publish(lake.project, runtime, rescored).action == "noop"
    assert runtime.table_version(lake.target) == 0

    lake.add(lake.flights.iloc[60:75])  # v1: a window of 15 inserted rows, read from the change feed on Spark
    assert noop_before_spark(lake.project, runtime, preflight(lake.project, runtime)) is None  # Spark plans it
    window = score(lake.project, runtime)
    assert window.scope["read"] == "cdf" and window.counts["rows_in"] == 15
    appended = publish(lake.project, runtime, window)
    assert (appended.action, appended.table_version, appended.engine) == ("append", 1, "spark-delta")
    assert len(runtime.read_table(lake.target)) == 75 and runtime.read_table(lake.target)["flight_id"].is_unique


def test_an_update_in_a_spark_window_is_rejected_or_rebuilt_as_configured(spark_lake):
    lake, runtime = spark_lake, spark_lake.runtime
    lake.add(lake.flights.iloc[:40])
    publish(lake.project, runtime, score(lake.project, runtime))
    lake.add(lake.flights.iloc[40:50])  # v1
    first = int(lake.flights["flight_id"].iloc[0])
    DeltaTable(str(runtime.table_path(INCOMING))).update(predicate=f"flight_id = {first}",
                                                         updates={"distance": "distance + 1"})  # v2
    with pytest.raises(SourceChangedError, match=r"window v1..v2 \(v2: update_postimage/update_preimage\)"):
        score(lake.project, runtime)
    assert runtime.table_version(lake.target) == 0
    lake.configure(source_change_policy="rebuild_on_change")
    rebuilt = publish(lake.project, runtime, score(lake.project, runtime))
    assert (rebuilt.action, rebuilt.engine, rebuilt.receipt["batch_compute"]) == ("replace_table", "spark-delta", "spark")
    stored = runtime.read_table(lake.target)
    assert sorted(stored["flight_id"]) == sorted(lake.flights.iloc[:50]["flight_id"])


def test_a_vacuumed_spark_window_requires_recovery_and_leaves_the_table(spark_lake):
    lake, runtime = spark_lake, spark_lake.runtime
    lake.add(lake.flights.iloc[:30])
    publish(lake.project, runtime, score(lake.project, runtime))
    lake.add(lake.flights.iloc[30:40])  # v1
    lake.add(lake.flights.iloc[40:50])  # v2
    source = DeltaTable(str(runtime.table_path(INCOMING)))
    source.optimize.compact()
    DeltaTable(str(runtime.table_path(INCOMING))).vacuum(retention_hours=0, enforce_retention_duration=False,
                                                         dry_run=False)
    with pytest.raises(CdfRecoveryRequiredError) as err:
        score(lake.project, runtime)
    assert err.value.code == "cdf_recovery_required" and err.value.fields["first_version"] == 1
    assert "reading it failed" in str(err.value) and "lakescore publish --recover-predictions" in str(err.value)
    assert runtime.table_version(lake.target) == 0 and len(runtime.read_table(lake.target)) == 30


def test_a_snapshot_spark_run_publishes_with_the_facts_observed_when_it_was_staged(spark_lake):
    from lakescore.errors import NullPeriodError

    lake, runtime = spark_lake, spark_lake.runtime
    lake.configure(mode="snapshot", period_column="time_hour")
    lake.add(lake.flights.iloc[:40])
    run = score(lake.project, runtime)
    meta_path = runtime.runs_dir() / run.run_id / "run.json"
    saved = json.loads(meta_path.read_text())["facts"]
    hours = pd.to_datetime(lake.flights.iloc[:40]["time_hour"], utc=True)  # the source's rows, in pandas
    assert (saved["rows"], saved["period_column"], saved["period_nulls"]) == (40, "time_hour", 0)
    assert (saved["period_low"], saved["period_high"]) == (hours.min().value // 1000, hours.max().value // 1000)
    meta = json.loads(meta_path.read_text())
    meta["facts"]["period_nulls"] = 2  # publish reads the staged facts, not a new aggregate of the rows
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(NullPeriodError, match=rf"scored run {run.run_id} of {INCOMING} v0 has 2 row\(s\)"):
        publish(lake.project, runtime, load_scored(runtime, run.run_id))
    assert not runtime.table_exists(lake.target)
    meta["facts"]["period_nulls"] = 0
    meta_path.write_text(json.dumps(meta))
    done = publish(lake.project, runtime, load_scored(runtime, run.run_id))
    days = (hours.min().floor("D"), hours.max().floor("D") + pd.Timedelta(days=1))
    assert (done.action, done.receipt["rows_in"]) == ("replace_period", 40)
    assert (done.receipt["period_start"], done.receipt["period_end"]) == tuple(d.strftime("%Y-%m-%dT%H:%M:%SZ")
                                                                             for d in days)
    assert sorted(runtime.read_table(lake.target)["flight_id"]) == sorted(lake.flights.iloc[:40]["flight_id"])


def test_score_publish_on_spark_refuses_a_repeated_source_key_before_any_table_and_restores_the_session(route_lake):
    """The one pass checks the source's keys on a thread of its own while the driver sets up the
    UDF: a repeated key is refused before the prediction table is created, nothing is staged, and
    the session's split size is as it was."""
    from lakescore.errors import PublishError
    from lakescore.scoring.splits import OPEN_COST_CONF
    from lakescore.workflows.publish import score_and_publish

    lake, runtime = route_lake, route_lake.runtime
    lake.add(pd.concat([lake.flights.iloc[:30], lake.flights.iloc[5:6]]))  # one flight twice
    spark = runtime.spark()
    before = spark.conf.get(OPEN_COST_CONF, None)
    with pytest.raises(PublishError, match=r"^1 record key\(s\) within this run \(e.g. \[\{'flight_id': "):
        score_and_publish(lake.project, runtime)
    assert not runtime.table_exists(lake.target)
    assert not list(runtime.runs_dir().glob("*/run.json"))
    assert spark.conf.get(OPEN_COST_CONF, None) == before


def test_score_publish_on_spark_is_one_pass_with_the_counts_and_facts_of_a_staged_run(route_lake, small_chain):
    """``score --publish`` on Spark stages nothing: the UDF's output goes into the commit, the keys
    and facts come from the source read, the tally from the commit's own pass; and all of them
    equal those of a staged run of the same source version. On classic Spark and Spark Connect."""
    from lakescore.workflows.publish import list_receipts, score_and_publish

    lake, runtime = route_lake, route_lake.runtime
    lake.configure(mode="snapshot", period_column="time_hour")
    lake.add(lake.flights.iloc[:40])
    staged = score(lake.project, runtime)  # v0, staged (lakescore score)
    done = score_and_publish(lake.project, runtime)  # v0 again, in one pass
    assert not (runtime.runs_dir() / done["run_id"]).exists()  # nothing staged, nothing read back
    assert [p.name for p in runtime.runs_dir().glob("*/run.json")] == ["run.json"]  # the staged run's only
    want = small_chain.predict(lake.flights.iloc[:40])
    counts = {"rows_in": 40, "predicted": int((want["scoring_status"] == "predicted").sum()),
              "excluded": int((want["scoring_status"] == "excluded").sum())}
    assert counts["excluded"] > 0 and staged.counts == counts
    assert {k: done[k] for k in counts} == counts and done["exclusions"] == staged.summary()["exclusions"]
    receipt = done["publish"]["receipt"]
    assert (done["publish"]["action"], done["publish"]["engine"]) == ("replace_period", "spark-delta")
    assert {k: receipt[k] for k in counts} == counts  # the counts the commit observed, in the receipts table
    hours = pd.to_datetime(lake.flights.iloc[:40]["time_hour"], utc=True)
    days = (hours.min().floor("D"), hours.max().floor("D") + pd.Timedelta(days=1))
    assert (receipt["period_start"], receipt["period_end"]) == tuple(d.strftime("%Y-%m-%dT%H:%M:%SZ") for d in days)
    listed = list_receipts(runtime, lake.target, batch_compute="spark")["receipts"][0]
    assert listed["run_id"] == done["run_id"] and {k: listed[k] for k in counts} == counts
    stored = runtime.read_table(lake.target)
    assert sorted(stored["flight_id"]) == sorted(lake.flights.iloc[:40]["flight_id"]) and stored["flight_id"].is_unique
    mine = as_pandas(staged.predictions).sort_values("flight_id", ignore_index=True)
    assert stored.sort_values("flight_id", ignore_index=True)["prediction"].tolist() == mine["prediction"].tolist()
