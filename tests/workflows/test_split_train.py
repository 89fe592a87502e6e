"""Split training on a real local Spark: search on a sample, refit per slice on the workers, paste,
register one version that says what it covers; refusal below the floor; every injected failure
ends with the sampled fit registered and its note."""

import dataclasses
import shutil
import warnings
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from fixtures.configs import without_feature_lookups
from fixtures.runs import as_pandas

from lakescore.config import load_project
from lakescore.demo_data import INCOMING
from lakescore.pasting import PastingEnsemble
from lakescore.runtime import LocalRuntime
from lakescore.slices import CODE_COLUMNS, key_codes
from lakescore.workflows.score import score
from lakescore.workflows.split_train import FAULT_ENV, coded_rows
from lakescore.workflows.train import train

pytestmark = pytest.mark.long

REPO = Path(__file__).resolve().parents[2]
TABLE = "main.flights.flights"
ROWS = 24_000  # 19,200 training rows: 2 workers (local[2]) x 8,000 fitted, about 3,200 left out


@pytest.fixture(scope="module")
def flights_24k(demo_tables):
    flights = demo_tables[TABLE]
    return flights.iloc[::13].head(ROWS).reset_index(drop=True)


def _project(folder: Path, **split_training):
    shutil.copytree(REPO / "config", folder, dirs_exist_ok=True)
    without_feature_lookups(folder)  # split training does not take feature_lookups yet
    path = folder / "training.yml"
    data = yaml.safe_load(path.read_text())
    data["max_rows"] = 8000
    data["split_training"] = {"enabled": True, "min_rows_per_worker": 2000, **split_training}
    path.write_text(yaml.safe_dump(data))
    return load_project(folder)


def _train(home: Path, rows: pd.DataFrame, spark, **split_training):
    runtime = LocalRuntime(home / ".lakescore")
    runtime.spark_session = spark
    runtime.write_table(TABLE, rows)
    runtime.write_table(INCOMING, rows.iloc[:300].reset_index(drop=True))
    project = _project(home / "config", **split_training)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")  # the local store's notices
        return project, runtime, train(project, runtime)


@pytest.fixture(scope="module")
def split_trained(tmp_path_factory, flights_24k, spark):
    """The split model trained once for the module: (project, runtime, TrainResult)."""
    return _train(tmp_path_factory.mktemp("split"), flights_24k, spark)


def _description(result):
    return mlflow.MlflowClient().get_model_version(result.model_name, str(result.version)).description


def test_the_split_fit_is_one_version_that_says_what_it_covers(split_trained):
    project, runtime, result = split_trained
    split = result.split
    assert split["fit"] == "split" and split["slices"] == 2
    assert split["rows"] == 16_000  # each of the 2 workers fitted max_rows 8,000 rows
    assert split["training_rows"] == split["rows"] + split["left_out"] and split["left_out"] > 2000
    assert f"the workers could not hold every row: {split['left_out']:,} training rows were left out" in split["note"]
    assert "this is not the same as one fit over all 16,000 rows" in split["note"]
    assert split["note"] in _description(result)
    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")
    assert model.model_config["split_training"]["slices"] == 2
    assert isinstance(model.unwrap_python_model().chain, PastingEnsemble)
    # the metrics are the search's on its holdout (the phase store's record), never slice averages
    search = next(p for p in runtime.phase_store().phases(split["job"]) if p["phase"] == "search")
    assert result.metrics == search["record"]["metrics"]
    assert result.metrics["log_loss"] != split["split_holdout_metrics"]["log_loss"]
    assert split["split_holdout_metrics"]["log_loss"] <= result.metrics["log_loss"]  # never worse than the sample
    assert [(p["phase"], p["state"]) for p in split["phases"]] == [
        ("search", "finished"), ("refit", "finished"), ("assemble", "finished"), ("register", "claimed")]


def test_slices_are_the_same_in_spark_and_pandas(split_trained, spark):
    project, runtime, _ = split_trained
    keys = list(project.training.data.record_keys)
    got = coded_rows(runtime.spark_source(TABLE, version=0), keys, salt=42, holdout_fraction=0.2)
    on_spark = got.select(*keys, *CODE_COLUMNS).toPandas().set_index(keys).sort_index()
    single = runtime.read_table(TABLE, version=0)
    on_pandas = key_codes(single, keys, salt=42).set_axis(pd.Index(single[keys[0]], name=keys[0])).sort_index()
    assert len(on_spark) == ROWS and (on_spark.to_numpy() == on_pandas.to_numpy()).all()


def test_the_pasted_model_scores_identically_through_spark_and_single_node(split_trained, spark):
    project, runtime, result = split_trained
    single = score(dataclasses.replace(project, inference=project.inference.model_copy(
        update={"batch_compute": "single_node"})), runtime)
    on_spark = score(dataclasses.replace(project, inference=project.inference.model_copy(
        update={"batch_compute": "spark"})), runtime)
    a = single.predictions.set_index("flight_id").sort_index()
    b = as_pandas(on_spark.predictions).set_index("flight_id").sort_index()
    assert len(a) == 300 and a["scoring_status"].eq("predicted").sum() > 250
    assert a["scoring_status"].tolist() == b["scoring_status"].tolist()
    assert a["prediction"].tolist() == b["prediction"].tolist()
    assert np.array_equal(a["probability"].to_numpy(dtype="float64", na_value=np.nan),
                          b["probability"].to_numpy(dtype="float64", na_value=np.nan), equal_nan=True)
    # and the probability is the mean of the slice chains' (each loaded on its own)
    from lakescore.chain import FittedChain

    folder = mlflow.artifacts.download_artifacts(f"models:/{result.model_name}/{result.version}/artifacts/chain")
    rows = runtime.read_table(INCOMING).set_index("flight_id").sort_index().reset_index()
    members = [FittedChain.load(f"{folder}/components/slice_{i:02d}").predict(rows)["probability"]
               .to_numpy(dtype="float64", na_value=np.nan) for i in range(2)]
    predicted = a["scoring_status"].eq("predicted").to_numpy()
    assert a["probability"].to_numpy(dtype="float64")[predicted] == pytest.approx(
        ((members[0] + members[1]) / 2)[predicted], abs=1e-12)


def test_below_the_floor_it_refuses_to_split_and_registers_the_sample_saying_why(tmp_path, flights_24k, spark):
    _, _, result = _train(tmp_path, flights_24k, spark, min_rows_per_worker=9000)
    assert result.split["fit"] == "sampled" and result.split["slices"] == 0
    assert "split refused: 19," in result.split["note"]
    assert "over 2 workers is 8,000 rows per worker, below split_training.min_rows_per_worker 9,000" \
        in result.split["note"]
    assert result.split["note"] in _description(result)


@pytest.mark.parametrize("fault, why", [
    ("no_workers", "no worker finished a slice, the refit job failed"),
    ("slices", "every slice failed (slice 0: RuntimeError: injected fault: slice 0 failed; slice 1: RuntimeError"),
    ("assemble", "assembling the 2 slice chains failed (SplitTrainingError: injected fault: the assemble phase"),
])
def test_every_injected_failure_registers_the_sampled_model_with_its_note(tmp_path, flights_24k, spark, monkeypatch,
                                                                          fault, why):
    monkeypatch.setenv(FAULT_ENV, fault)
    _, _, result = _train(tmp_path, flights_24k, spark)
    assert result.version == 1 and result.split["fit"] == "sampled"
    assert result.split["note"].startswith("sampled fit: one process fitted ")
    assert why in result.split["note"]
    assert result.split["note"] in _description(result)
    model = mlflow.pyfunc.load_model(f"models:/{result.model_name}/{result.version}")
    assert not isinstance(model.unwrap_python_model().chain, PastingEnsemble)
