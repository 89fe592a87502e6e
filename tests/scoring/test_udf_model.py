"""The run's copy of the model for spark_udf: copied once on the driver (its workers never open the
registry), with no input schema (MLflow hands the batch over as it is; lakescore conforms it)."""

from pathlib import Path

import mlflow

from lakescore.admission.certificate import Certificate
from lakescore.admission.evidence import admit
from lakescore.packaging import log_and_register
from lakescore.scoring.udf_model import local_model


def test_each_call_copies_the_registered_model_into_a_folder_of_its_own_that_loads_without_the_registry(
        runtime, small_chain, flights_sample, tmp_path):
    runtime.mlflow()
    with mlflow.start_run():
        model = log_and_register(small_chain, example=flights_sample.head(5), name="main.t.udf", alias="champion",
                                 evidence=admit(small_chain, flights_sample.iloc[1500:]))
    first, second = (Path(local_model(model.model_uri, tmp_path / "models")) for _ in range(2))
    assert first != second
    for copy in (first, second):
        assert copy.relative_to(tmp_path / "models").parts[0].startswith("main.t.udf_1-")
        assert (copy / "MLmodel").is_file()
        assert Certificate.from_json((copy / "artifacts" / "certificate.json").read_text()) == model.certificate
    rows = flights_sample.iloc[1500:1520].reset_index(drop=True)
    mlflow.set_registry_uri(f"sqlite:///{tmp_path / 'no-such-dir' / 'registry.db'}")  # what a worker must not need
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'no-such-dir' / 'tracking.db'}")
    try:
        got = mlflow.pyfunc.load_model(str(first)).predict(rows[list(small_chain.input_columns)])
    finally:
        runtime.mlflow()
    assert got["prediction"].tolist() == small_chain.predict(rows)["prediction"].tolist()
    copied = mlflow.pyfunc.load_model(str(first)).metadata
    registered = mlflow.models.get_model_info(model.model_uri)
    assert copied.get_input_schema() is None and registered.signature.inputs is not None
    assert copied.get_output_schema() == registered.signature.outputs
    assert copied.get_params_schema() == registered.signature.params
