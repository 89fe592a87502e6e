"""Feature lookups on the databricks placement go through Databricks Feature Engineering.

Only the workspace is replaced: ``databricks.feature_engineering`` is the fake of
tests/fixtures/fake_feature_engineering.py (the real package's signatures and model layout, its own joins, on the
real Delta tables of the local session), MLflow is SQLite in a temporary folder, tables are
``spark_catalog.<schema>.<table>``. Expected values come from the local placement's own route
(pandas and Spark joins) on the same tables and model, or are written out by hand.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from fixtures.configs import CONFIG, without_feature_lookups
from fixtures.fake_feature_engineering import CALLS, install

from lakescore.config import ProjectConfig, load_project
from lakescore.errors import FeatureLookupError, RuntimeUnsupportedError
from lakescore.frames import null_mask_name
from lakescore.model_uri import FE_RAW_MODEL, pyfunc_uri
from lakescore.packaging import read_certificate
from lakescore.runtime import DatabricksRuntime, LocalRuntime
from lakescore.runtime.databricks import MlflowUris
from lakescore.runtime.feature_engineering import fe_module
from lakescore.workflows.registration import TrainResult
from lakescore.workflows.score import score
from lakescore.workflows.train import train

pytestmark = [pytest.mark.spark, pytest.mark.long]


class WithoutFeatureStore(DatabricksRuntime):
    """The databricks runtime joining the lookups itself, as the local placement does: the expected side."""

    def feature_engineering(self) -> None:
        return None


def _runtime(cls: type, spark, tmp_path: Path) -> DatabricksRuntime:
    db = f"sqlite:///{tmp_path / 'workspace-mlflow.db'}"
    return cls(tmp_path / "Volumes" / "main" / "flights" / "lakescore", target="staging", uris=MlflowUris(db, db),
               session=spark, experiment="/Workspace/lakescore-test")


def _lookups(prefix: str) -> list[dict]:
    return [{"table_name": f"{prefix}.weather", "lookup_key": "origin", "feature_names": ["temp", "visib"],
             "rename_outputs": {"temp": "origin_temp"}, "timestamp_lookup_key": "time_hour"},
            {"table_name": f"{prefix}.planes", "lookup_key": ["tailnum"], "feature_names": ["year"],
             "rename_outputs": {"year": "plane_year"}}]


def _configure(project_dir: Path, prefix: str) -> None:
    """training.yml with the two lookups of this test (instead of the demo's); the joined columns
    imputed and scaled with the rest."""
    without_feature_lookups(project_dir)
    path = project_dir / "training.yml"
    training = yaml.safe_load(path.read_text())
    joined = ["origin_temp", "visib", "plane_year"]
    training["data"]["feature_columns"] += joined
    training["preprocessing"] = [{**s, "columns": [*s["columns"], *joined]}
                                 if s["name"] in ("impute_numeric", "scale_numeric") else s
                                 for s in training["preprocessing"]]
    training["feature_lookups"] = _lookups(prefix)
    path.write_text(yaml.safe_dump(training))


def _lookup_project(dbx, spark, project_dir: Path, flights_sample: pd.DataFrame, demo_tables):
    """Flights, weather (one row per origin and hour) and the planes of every other tailnum, in a
    fresh schema; the project trains on them with two lookups; 120 incoming flights to score."""
    schema = f"fe_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA spark_catalog.{schema}")
    prefix = f"spark_catalog.{schema}"
    _configure(project_dir, prefix)
    project = load_project(project_dir, catalog="spark_catalog", schema=schema)
    dbx.write_table(project.training.data.table, flights_sample)
    weather = demo_tables["main.flights.weather"].drop_duplicates(["origin", "time_hour"])
    dbx.write_table(f"{prefix}.weather", weather[["origin", "time_hour", "temp", "visib"]].reset_index(drop=True))
    planes = demo_tables["main.flights.planes"][["tailnum", "year"]]
    dbx.write_table(f"{prefix}.planes", planes.iloc[::2].reset_index(drop=True))
    incoming = flights_sample[flights_sample["month"] >= 10].head(120).reset_index(drop=True)
    dbx.write_table(project.inference.score_source_table, incoming, configuration={"delta.enableChangeDataFeed": "true"})
    return project, prefix, incoming


@dataclass(frozen=True)
class Trained:
    """The lookup project trained once through Feature Engineering, for the module's tests."""

    dbx: DatabricksRuntime
    folder: Path
    project: ProjectConfig
    prefix: str
    incoming: pd.DataFrame
    result: TrainResult
    training_calls: list[tuple[str, dict]]  # what training asked of Feature Engineering


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory: pytest.TempPathFactory, flights_sample: pd.DataFrame, demo_tables):
    """The lookup project (:func:`_lookup_project`) trained once by ``train`` through the fake
    Feature Engineering, which stays installed for the module's tests (each test sees only its
    own calls: :func:`_calls`)."""
    folder = tmp_path_factory.mktemp("feature-engineering")
    project_dir = folder / "config"
    shutil.copytree(CONFIG, project_dir)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)  # MLflow's default artifact root is relative to the working folder
        install(patch)
        dbx = _runtime(DatabricksRuntime, spark, folder)
        project, prefix, incoming = _lookup_project(dbx, spark, project_dir, flights_sample, demo_tables)
        result = train(project, dbx)
        yield Trained(dbx, folder, project, prefix, incoming, result, list(CALLS))


@pytest.fixture
def calls(trained: Trained) -> list[tuple[str, dict]]:
    """The Feature Engineering calls of this test only."""
    CALLS.clear()
    return CALLS


def _calls(name: str, calls: list[tuple[str, dict]] = CALLS) -> list[dict]:
    return [kwargs for called, kwargs in calls if called == name]


def test_train_joins_logs_and_registers_through_feature_engineering(trained: Trained, spark) -> None:
    project, prefix, result = trained.project, trained.prefix, trained.result
    assert result.feature_lookups == [{"table": f"{prefix}.weather", "version": 0},
                                      {"table": f"{prefix}.planes", "version": 0}]

    fitting, logged = _calls("create_training_set", trained.training_calls)
    for call in (fitting, logged):  # the FeatureLookup fields, from training.yml's spec
        weather, planes = call["feature_lookups"]
        assert (weather.table_name, weather.lookup_key, weather.feature_names, weather.rename_outputs,
                weather.timestamp_lookup_key) == (f"{prefix}.weather", ["origin"], ["temp", "visib"],
                                                  {"temp": "origin_temp"}, "time_hour")
        assert (planes.table_name, planes.lookup_key, planes.feature_names, planes.rename_outputs,
                planes.timestamp_lookup_key) == (f"{prefix}.planes", ["tailnum"], ["year"], {"year": "plane_year"},
                                                 None)
        assert call["label"] is None  # is_late is derived (label_expression), not a column of the table
    assert fitting["exclude_columns"] == []  # the row filter and the label read any column
    kept = [c for c in logged["df"].columns if c not in logged["exclude_columns"]]
    assert sorted(kept) == sorted(["hour", "dep_delay", "distance", "carrier", "origin", "dest", "time_hour",
                                   "tailnum", "dep_time"])  # what the model reads at scoring: the features, the
    # lookups' keys and dep_time (scoring.yml's eligibility rule); not month, arr_delay, flight_id, ...

    (log,) = _calls("log_model", trained.training_calls)
    assert log["flavor"] is mlflow.pyfunc and log["artifact_path"] == "model"
    assert log["training_set"] is not None and log["training_set"].exclude_columns == logged["exclude_columns"]
    assert log["registered_model_name"] == result.model_name
    assert log["model"].endswith("pyfunc_entry.py") and set(log["artifacts"]) == {"chain", "certificate", "evidence"}
    assert {"origin_temp", "visib", "plane_year"} <= set(log["model_config"]["input_kinds"])

    uri = f"models:/{result.model_name}/{result.version}"
    assert result.version == 1 and pyfunc_uri(uri) == f"{uri}/{FE_RAW_MODEL}"
    assert read_certificate(uri).digest == result.certificate["digest"]  # the registered version holds it
    chain = mlflow.pyfunc.load_model(pyfunc_uri(uri)).unwrap_python_model().chain
    assert [s.table_name for s in chain.lookups] == [f"{prefix}.weather", f"{prefix}.planes"]

    # the same project trained on the same tables with lakescore's own pandas join: the same rows, split and fit
    local = _runtime(WithoutFeatureStore, spark, trained.folder / "expected")
    expected = train(project, local, retrain="always")
    assert result.rows == expected.rows
    assert result.metrics == pytest.approx(expected.metrics, abs=1e-12)


def test_score_batch_scores_as_the_spark_route_and_records_the_versions(trained: Trained, calls, spark) -> None:
    from fixtures.runs import as_pandas

    project, prefix, incoming, dbx = trained.project, trained.prefix, trained.incoming, trained.dbx
    run = score(project, dbx)
    (call,) = _calls("score_batch")
    assert call["model_uri"] == f"models:/{project.training.registry.model_name}/1"
    assert call["params"] == {"batch_rows": project.inference.spark_udf_prediction_batch_rows, "null_transport": True}
    # the UDF's own transport: each output in its type, then its null mask (decoded as on the local Spark route)
    assert f"probability double, {null_mask_name('probability')} boolean" in call["result_type"]
    assert "origin_temp" not in call["df"].columns and "prediction" not in call["df"].columns
    assert run.plan.feature_tables == {f"{prefix}.weather": 0, f"{prefix}.planes": 0}
    assert run.summary()["feature_lookups"] == [{"table": f"{prefix}.weather", "version": 0},
                                                {"table": f"{prefix}.planes", "version": 0}]

    got = as_pandas(run.predictions).set_index("flight_id").sort_index()
    expected_run = score(project, _runtime(WithoutFeatureStore, spark, trained.folder))  # same registry, joins in Spark
    expected = as_pandas(expected_run.predictions).set_index("flight_id").loc[got.index]
    assert len(got) == len(incoming) and got["scoring_status"].tolist() == expected["scoring_status"].tolist()
    assert got["exclusion_reason"].tolist() == expected["exclusion_reason"].tolist()
    assert got["prediction"].tolist() == expected["prediction"].tolist()
    no_plane = incoming.loc[~incoming["tailnum"].isin(dbx.read_table(f"{prefix}.planes")["tailnum"]), "flight_id"]
    assert got.loc[no_plane, "scoring_status"].eq("predicted").sum() > 10  # null plane_year: imputed, scored
    assert got["probability"].to_numpy(dtype="float64", na_value=float("nan")) == pytest.approx(
        expected["probability"].to_numpy(dtype="float64", na_value=float("nan")), abs=1e-12, nan_ok=True)


@pytest.fixture
def dbx(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DatabricksRuntime:
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is relative to the working folder
    install(monkeypatch)
    return _runtime(DatabricksRuntime, spark, tmp_path)


@pytest.fixture
def lookup_project(dbx, spark, project_dir: Path, flights_sample: pd.DataFrame, demo_tables):
    """:func:`_lookup_project` of this test alone (its tables may be changed)."""
    return _lookup_project(dbx, spark, project_dir, flights_sample, demo_tables)


def test_a_feature_table_that_moves_while_feature_engineering_reads_it_is_refused(dbx, lookup_project) -> None:
    _, prefix, _ = lookup_project
    store = dbx.feature_engineering()
    store.check_versions({f"{prefix}.planes": 0}, what="training")  # unchanged: nothing to say
    dbx.write_table(f"{prefix}.planes", pd.DataFrame({"tailnum": ["N0NE"], "year": pd.array([2001], dtype="Int64")}),
                    mode="append")
    with pytest.raises(FeatureLookupError) as err:
        store.check_versions({f"{prefix}.planes": 0}, what="training")
    assert f"feature table {prefix}.planes moved from v0 to v1 while training read it" in str(err.value)


def test_without_the_package_the_databricks_placement_says_what_to_install(monkeypatch, tmp_path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "databricks.feature_engineering", None)  # import fails as if absent
    with pytest.raises(RuntimeUnsupportedError) as err:
        fe_module()
    assert "Databricks Runtime for Machine Learning" in str(err.value)
    assert LocalRuntime(tmp_path).feature_engineering() is None
