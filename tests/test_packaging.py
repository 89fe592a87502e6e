"""The pyfunc wrapper: rows per model call, the registry round trip, and a worker refusing a tampered model."""

from importlib.metadata import version
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from lakescore.admission.evidence import admit
from lakescore.errors import CertificateError, ModelArtifactsMissingError, UncertifiedModelError
from lakescore.model_requirements import pip_requirements
from lakescore.packaging import log_and_register, predict_in_batches


def test_a_worker_batch_of_25001_rows_makes_3_model_calls(small_chain, flights_sample, monkeypatch):
    from lakescore.compiled import CompiledPlan

    batch = pd.concat([flights_sample] * 13, ignore_index=True).head(25001)
    passes, run = [], CompiledPlan.run
    monkeypatch.setattr(CompiledPlan, "run", lambda plan, frame: passes.append(len(frame)) or run(plan, frame))
    scored = predict_in_batches(small_chain, batch, 10000)
    assert passes == [10000, 10000, 5001]  # one pass of the plan and one model call each
    assert scored.index.equals(batch.index)
    passes.clear()
    pd.testing.assert_frame_equal(predict_in_batches(small_chain, batch, 100000), scored)
    assert passes == [16384, 8617]  # never more rows per model call than the chain's own pass
    with pytest.raises(ValueError, match="batch_rows must be at least 1; got 0"):
        predict_in_batches(small_chain, batch, 0)


@pytest.fixture
def evidence(small_evidence):
    """small_chain's evidence on the sample's rows 1000-1999 (admitted once per session: conftest)."""
    return small_evidence


@pytest.fixture
def registered(runtime, small_chain, flights_sample, evidence):
    runtime.mlflow()
    with mlflow.start_run():
        return log_and_register(small_chain, example=flights_sample.head(5), name="main.t.m", alias="champion",
                                evidence=evidence)


def test_packaging_refuses_a_model_without_evidence(runtime, small_chain, flights_sample):
    runtime.mlflow()
    with mlflow.start_run(), pytest.raises(UncertifiedModelError, match="without admission evidence version 2"):
        log_and_register(small_chain, example=flights_sample.head(5), name="main.t.m", alias=None, evidence={})
    with mlflow.start_run(), pytest.raises(UncertifiedModelError, match="got 1"):
        log_and_register(small_chain, example=flights_sample.head(5), name="main.t.m", alias=None,
                         evidence={"evidence_version": 1})


def test_the_registered_pyfunc_scores_like_the_chain(registered, small_chain, flights_sample):
    model = mlflow.pyfunc.load_model(registered.model_uri)
    got = model.predict(flights_sample[list(small_chain.input_columns)], params={"batch_rows": 7})
    want = small_chain.predict(flights_sample)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    assert (want["exclusion_reason"] == "ineligible:cancelled").sum() == flights_sample["dep_time"].isna().sum()


def test_null_transport_carries_a_null_mask_beside_each_output(registered, small_chain, flights_sample):
    model = mlflow.pyfunc.load_model(registered.model_uri)
    got = model.predict(flights_sample[list(small_chain.input_columns)], params={"null_transport": True})
    assert list(got.columns) == ["prediction", "_lakescore_null_prediction", "probability",
                                 "_lakescore_null_probability", "scoring_status", "_lakescore_null_scoring_status",
                                 "exclusion_reason", "_lakescore_null_exclusion_reason"]
    want = small_chain.predict(flights_sample)
    predicted = (want["scoring_status"] == "predicted").to_numpy()
    assert got["scoring_status"].dtype == "int64" and got["exclusion_reason"].dtype == "int64"  # codes, not text
    assert (got["scoring_status"].to_numpy() == np.where(predicted, 0, 1)).all()  # STATUSES: predicted, excluded
    assert flights_sample["dep_time"].isna().sum() < (~predicted).sum() < len(flights_sample)
    assert (got["_lakescore_null_exclusion_reason"].to_numpy() == predicted).all()
    cancelled = flights_sample["dep_time"].isna().to_numpy()
    assert (got.loc[cancelled, "exclusion_reason"] == 0).all()  # ineligible:cancelled, the first reason
    assert (got.loc[~predicted & ~cancelled, "exclusion_reason"] == 1).all()  # outlier:distance_outlier
    assert (got.loc[predicted, "exclusion_reason"] == 0).all()  # a filler, never read: the mask says null
    assert (got["_lakescore_null_probability"].to_numpy() == ~predicted).all()
    assert got["prediction"].dtype == "int64" and got.loc[~predicted, "prediction"].eq(0).all()
    assert not got["_lakescore_null_scoring_status"].any()


def test_a_worker_refuses_a_tampered_artifact(registered, runtime):
    chain_json = next((runtime.home / "mlartifacts").rglob("chain/chain.json"))
    chain_json.write_text(chain_json.read_text().replace('"engine": "pandas"', '"engine": "pandas" '))
    with pytest.raises(CertificateError, match="does not match its certificate"):
        mlflow.pyfunc.load_model(registered.model_uri)


def test_the_logged_model_is_code_not_a_pickle(registered):
    folder = Path(mlflow.artifacts.download_artifacts(registered.model_uri))
    conf = yaml.safe_load((folder / "MLmodel").read_text())["flavors"]["python_function"]
    assert conf["model_code_path"].endswith("pyfunc_entry.py") and "python_model" not in conf
    assert not list(folder.rglob("*.pkl"))
    assert type(mlflow.pyfunc.load_model(registered.model_uri).unwrap_python_model()).__name__ == "LakescoreModel"


def test_the_requirements_are_declared_not_inferred_by_loading_the_model_in_a_child_process(
        runtime, small_chain, flights_sample, evidence, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("MLflow inferred the requirements: it loads the model in a child process (~5 s)")

    monkeypatch.setattr(mlflow.models, "infer_pip_requirements", refuse)
    runtime.mlflow()
    with mlflow.start_run():
        model = log_and_register(small_chain, example=flights_sample.head(5), name="main.t.req", alias=None,
                                 evidence=evidence)
    folder = Path(mlflow.artifacts.download_artifacts(model.model_uri))
    lines = (folder / "requirements.txt").read_text().splitlines()
    installed = {name: version(name) for name in ("mlflow", "numpy", "pandas", "pyarrow", "scipy", "scikit-learn")}
    assert lines[0].startswith("mlflow") and lines[0].endswith(f"=={installed['mlflow']}")  # MLflow's own pin
    assert lines[1:] == [f"lakescore=={version('lakescore')}", *(f"{n}=={v}" for n, v in installed.items() if n != "mlflow")]
    assert f"scikit-learn=={model.certificate.libraries['scikit-learn']}" in lines  # the sealed version


def test_a_boosted_polars_models_requirements_name_the_installed_distributions():
    libraries = {"scikit-learn": version("scikit-learn"), "xgboost": version("xgboost-cpu")}
    lines = pip_requirements(libraries, "polars")
    assert lines[-3:] == [f"scikit-learn=={version('scikit-learn')}", f"xgboost-cpu=={version('xgboost-cpu')}",
                          f"polars=={version('polars')}"]  # the module xgboost is installed as xgboost-cpu
    assert pip_requirements({"scikit-learn": "x", "lightgbm": "y"}, "pandas")[-1] == f"lightgbm=={version('lightgbm')}"


@pytest.mark.filterwarnings("ignore:``mlflow.models.utils.validate_serving_input`` is deprecated:FutureWarning")
def test_the_signature_is_standard_so_mlflows_own_server_takes_a_null_whole_number(
        runtime, small_chain, flights_sample, evidence, caplog):
    """Issue 9: no warning at logging, MLflow's scoring-server validation accepts an ordinary
    ``dataframe_split`` request with a null in a whole-number column, and the kinds training saw
    are kept for preflight and serving."""
    import json
    import logging

    from mlflow.models import get_model_info
    from mlflow.models.utils import validate_serving_input

    from lakescore.packaging import model_input_kinds

    example = flights_sample.head(5).assign(hour=flights_sample["hour"].head(5).astype("Int64"))
    runtime.mlflow()
    with caplog.at_level(logging.WARNING, logger="mlflow"), mlflow.start_run():
        model = log_and_register(small_chain, example=example, name="main.t.m", alias=None, evidence=evidence)
    assert [r.getMessage()[:60] for r in caplog.records if r.levelno >= logging.WARNING] == []
    kinds = model_input_kinds(model.model_uri)
    assert kinds["hour"] == "long" and kinds["dep_delay"] == "double" and kinds["carrier"] == "string"
    declared = {s.name: type(s.type).__name__ for s in get_model_info(model.model_uri).signature.inputs.inputs}
    assert set(declared.values()) == {"AnyType"} and list(declared) == list(small_chain.input_columns)
    rows = flights_sample.head(2)[list(small_chain.input_columns)].astype(object).where(lambda f: f.notna(), None)
    rows.loc[rows.index[0], "hour"] = None
    body = json.dumps({"dataframe_split": {"columns": list(rows.columns), "data": rows.values.tolist()}})
    scored = validate_serving_input(model.model_uri, body)
    assert list(scored["scoring_status"]) == ["predicted", "predicted"]  # the recipe imputes hour


def test_the_version_description_says_the_default_rule_without_a_threshold(registered):
    version = mlflow.MlflowClient().get_model_version("main.t.m", str(registered.version))
    assert version.description == "Decision threshold in force: default 0.5 (the model's own predict: argmax)."


def test_a_registered_threshold_labels_every_row_and_a_worker_refuses_it_changed(runtime, small_chain, flights_sample):
    import dataclasses
    import json

    from lakescore.thresholds import Threshold

    chain = dataclasses.replace(small_chain, threshold=Threshold(value=0.25, method="youden", holdout_rows=968))
    runtime.mlflow()
    with mlflow.start_run():
        registered = log_and_register(chain, example=flights_sample.head(5), name="main.t.m", alias="champion",
                                      evidence=admit(chain, flights_sample.iloc[1000:]))
    assert mlflow.MlflowClient().get_model_version("main.t.m", str(registered.version)).description == (
        "Decision threshold in force: threshold 0.25 (optimize: youden on 968 holdout rows; positive when p >= 0.25).")
    got = mlflow.pyfunc.load_model(registered.model_uri).predict(flights_sample[list(chain.input_columns)])
    plain = small_chain.predict(flights_sample)
    pd.testing.assert_series_equal(got["probability"].reset_index(drop=True), plain["probability"].reset_index(drop=True))
    predicted = (plain["scoring_status"] == "predicted").to_numpy()
    p = plain["probability"].to_numpy(dtype="float64", na_value=np.nan)[predicted]
    assert (got["prediction"].to_numpy(dtype="int64", na_value=-1)[predicted] == (p >= 0.25)).all()
    assert 0 < ((p >= 0.25) & (p < 0.5)).sum()  # rows whose label the threshold changed
    chain_json = next((runtime.home / "mlartifacts").rglob("chain/chain.json"))
    meta = json.loads(chain_json.read_text())
    meta["threshold"]["value"] = 0.5
    chain_json.write_text(json.dumps(meta, indent=1, sort_keys=True))
    with pytest.raises(CertificateError, match="does not match its certificate.*recipe_sha256: sealed"):
        mlflow.pyfunc.load_model(registered.model_uri)


def test_a_version_whose_artifact_folder_is_gone_is_named_with_the_folder_not_called_uncertified(registered, runtime):
    import re
    import shutil

    from lakescore.packaging import model_input_kinds, read_certificate

    folder = Path(mlflow.MlflowClient().get_model_version_download_uri("main.t.m", "1").removeprefix("file://"))
    assert folder.is_dir() and folder.is_relative_to(runtime.home / "mlartifacts")
    shutil.rmtree(runtime.home / "mlartifacts")
    expected = f"artifacts of main.t.m v1 are expected at {folder}, which does not exist: was the home moved"
    for read in (read_certificate, model_input_kinds):  # the certificate, and the signature serving reads first
        with pytest.raises(ModelArtifactsMissingError, match=re.escape(expected)) as caught:
            read("models:/main.t.m/1")
        assert caught.value.code == "model_artifacts_missing" and "retrain" not in str(caught.value).lower()
