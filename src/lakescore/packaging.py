"""The MLflow pyfunc wrapper, its signature, and the registry.

The logged model holds the saved chain folder and its certificate as artifacts. ``load_context``
re-verifies the certificate before anything is scored; ``predict`` conforms each input column to
the signature's type (:mod:`lakescore.conform`; a row holding a value of another kind is excluded
as ``invalid:<column>``) and scores the rest with ``FittedChain.predict``, whose model calls take at
most ``batch_rows`` rows each.

MLflow's own input-schema enforcement fails a whole batch on one null in a whole-number column (or
one value of another kind) and puts the batch's rows into its error message, so every input is
declared ``AnyType`` in the signature and its kind kept in the model config (``input_kinds``), which
preflight compares with the source table, serving validates requests against, and
:func:`lakescore.conform.conform_inputs` applies. The signature stays standard: MLflow's own
scoring server accepts the model with ordinary ``dataframe_split`` requests.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
import numpy as np
import pandas as pd

from lakescore.admission.certificate import Certificate, evidence_text, require_admitted, seal, verify
from lakescore.chain import PASS_ROWS, STATUS_EXCLUDED, FittedChain
from lakescore.conform import conform_inputs
from lakescore.errors import ModelNotFoundError, UncertifiedModelError
from lakescore.frames import to_transport
from lakescore.model_requirements import pip_requirements
from lakescore.model_set import ModelSet
from lakescore.pasting import PastingEnsemble
from lakescore.saved_models import load_saved
from lakescore.transport_codes import code_tables, encode

DEFAULT_BATCH_ROWS = 10000

if TYPE_CHECKING:  # annotations only
    from lakescore.config import ModelSelection


def predict_in_batches(chain: FittedChain | ModelSet, frame: pd.DataFrame, batch_rows: int) -> pd.DataFrame:
    """``chain.predict`` of ``frame`` with model calls of at most ``batch_rows`` rows
    (``spark_udf_prediction_batch_rows``; never more than :data:`lakescore.chain.PASS_ROWS`, the
    chain's own pass), consecutive and in order.

    The frame is not cut into frames: the chain passes over it in slices of that many rows and
    assembles one output frame. Slicing the frame instead, and concatenating the outputs, cost a
    third of the chain's time on a million flights in slices of 10,000 (1.10 s against 0.74 s,
    2-core machine).

    Raises
    ------
    ValueError
        ``batch_rows`` below 1.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1; got {batch_rows}")
    return chain.predict(frame, pass_rows=min(batch_rows, PASS_ROWS))


class LakescoreModel(mlflow.pyfunc.PythonModel):  # type: ignore[name-defined, misc]  # import mlflow loads mlflow.pyfunc
    """The pyfunc every route loads: a certified ``FittedChain``, or a certified ``ModelSet``
    (:mod:`lakescore.model_set`, the same scoring surface) when the saved folder holds one.

    Params (per call): ``batch_rows`` (int, rows per model call, default 10000) and
    ``null_transport`` (bool, default False): the Spark route's transport form, which it decodes:
    ``scoring_status``, ``exclusion_reason`` and text-class ``prediction`` as codes into the
    chain's tables (:func:`lakescore.transport_codes.encode`), then every output with a null mask
    (:func:`lakescore.frames.to_transport`). Without it, strings, as ``FittedChain.predict`` gives.
    """

    chain: FittedChain | ModelSet
    certificate: Certificate
    input_kinds: dict[str, str]
    code_tables: dict[str, tuple[str, ...]] | None = None

    def load_context(self, context: Any) -> None:
        chain_dir = Path(context.artifacts["chain"])
        self.chain = load_saved(chain_dir)
        cert_path = Path(context.artifacts["certificate"])
        if not cert_path.exists():
            raise UncertifiedModelError(f"model artifact {chain_dir.parent} has no certificate; retrain it")
        self.certificate = Certificate.from_json(cert_path.read_text())
        evidence_path = context.artifacts.get("evidence")
        require_admitted(self.certificate, Path(evidence_path).read_text() if evidence_path else None)
        verify(self.certificate, chain_dir, self.chain)
        self.input_kinds = dict((context.model_config or {}).get("input_kinds", {}))

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        params = params or {}
        frame, reasons = conform_inputs(model_input, getattr(self, "input_kinds", {}))
        invalid = pd.notna(reasons)
        batch_rows = int(params.get("batch_rows", DEFAULT_BATCH_ROWS))
        scored = predict_in_batches(self.chain, frame[~invalid] if invalid.any() else frame, batch_rows)
        if invalid.any():
            scored = with_excluded_rows(scored, frame.index, reasons, self.chain.output_dtypes)
        if not params.get("null_transport"):
            return scored
        if getattr(self, "code_tables", None) is None:
            self.code_tables = code_tables(self.chain)
        return to_transport(encode(scored, self.code_tables))  # type: ignore[arg-type]  # set on the line above


def with_excluded_rows(scored: pd.DataFrame, index: pd.Index, reasons: Any, dtypes: dict[str, str]) -> pd.DataFrame:
    """Put the rows that conformance excluded back among the scored ones, in input order.

    Parameters
    ----------
    scored : DataFrame of shape (n_valid, n_outputs)
        ``FittedChain.predict`` of the rows whose ``reasons`` entry is missing, in input order.
    index : Index of length n_rows
        The input frame's index.
    reasons : array of object, shape (n_rows,)
        ``invalid:<column>`` or None, from :func:`lakescore.conform.conform_inputs`.
    dtypes : dict of str to str
        ``FittedChain.output_dtypes``.

    Returns
    -------
    DataFrame of shape (n_rows, n_outputs) with ``index``: excluded rows have ``scoring_status``
    ``excluded``, their reason, and every other output null.
    """
    invalid = pd.notna(reasons)
    excluded = pd.DataFrame({name: pd.array([None] * int(invalid.sum()), dtype=dtype) for name, dtype in dtypes.items()},
                            index=np.flatnonzero(invalid))
    excluded["scoring_status"] = pd.array([STATUS_EXCLUDED] * len(excluded), dtype="string")
    excluded["exclusion_reason"] = pd.array(reasons[invalid].tolist(), dtype="string")
    kept = scored.set_axis(np.flatnonzero(~invalid))
    merged = pd.concat([kept, excluded]).sort_index()
    return merged.astype(dict(dtypes)).set_axis(index)


def typed_inputs(chain: FittedChain | ModelSet, example: pd.DataFrame) -> Any:
    """The MLflow input schema of the chain's raw input columns, typed from ``example``."""
    from mlflow.models import infer_signature

    return infer_signature(example[list(chain.input_columns)]).inputs


def signature_for(chain: FittedChain | ModelSet, example: pd.DataFrame) -> Any:
    """Model signature: the raw input columns, the scored output columns, and the call params.

    Outputs, from ``chain.output_dtypes``: ``prediction`` (long for integer classes, string for
    text classes, double for regression), ``probability`` (double, classification),
    ``scoring_status`` and ``exclusion_reason`` (string), then output-rule columns; every output
    may be null except ``scoring_status``. Inputs are the chain's input columns, each declared
    ``AnyType``: MLflow's column-wise enforcement would fail a whole batch on one null in a
    whole-number column or one bad value anywhere, quoting the batch's rows, so lakescore conforms
    inputs row by row itself (:func:`lakescore.conform.conform_inputs`) against the kinds typed
    from ``example`` and kept in the model config (:func:`typed_inputs`, :func:`input_kinds`).
    MLflow's element-wise pass over ``AnyType`` columns costs about 0.7 µs per value (0.16 s for
    84,292 rows x 3 columns on this machine).
    """
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema

    inputs = Schema([ColSpec(AnyType(), spec.name, required=spec.required)  # type: ignore[no-untyped-call]  # mlflow's AnyType() is unannotated
                     for spec in typed_inputs(chain, example).inputs])
    out_kinds = {"Int64": "long", "string": "string", "Float64": "double", "boolean": "boolean"}
    outputs = [ColSpec(out_kinds[dtype], name, required=(name == "scoring_status"))
               for name, dtype in chain.output_dtypes.items()]
    params = ParamSchema([ParamSpec("batch_rows", "long", DEFAULT_BATCH_ROWS),
                          ParamSpec("null_transport", "boolean", False)])
    return ModelSignature(inputs=inputs, outputs=Schema(outputs), params=params)  # type: ignore[arg-type]  # list is invariant; ColSpec is one of the kinds Schema takes


def input_kinds(schema: Any) -> dict[str, str]:
    """Input column -> MLflow type name (``long``, ``double``, ``string``, ...) of an input schema."""
    return {spec.name: getattr(spec.type, "name", str(spec.type)) for spec in schema.inputs}


def model_input_kinds(model_uri: str) -> dict[str, str]:
    """Input column -> MLflow type name of a logged model, in the model's column order
    (the first part of :func:`logged_model_config`)."""
    return logged_model_config(model_uri)[0]


def logged_model_config(model_uri: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A logged model's input kinds and its pyfunc model config, read in one registry call.

    The kinds come from the model config's ``input_kinds`` (what training saw); for a model logged
    without one, from its signature.

    Raises
    ------
    ModelNotFoundError
        When ``model_uri`` does not resolve to a logged model; ``ModelArtifactsMissingError`` (code
        ``model_artifacts_missing``) when it does but its artifact folder is missing.
    """
    from lakescore.model_uri import pyfunc_mlmodel

    try:
        info = pyfunc_mlmodel(model_uri)  # a Feature Engineering model: its raw model (a sub-path)
    except (mlflow.exceptions.MlflowException, OSError) as err:  # MLflow 3.8's local store raises OSError
        from lakescore.model_uri import require_artifacts

        require_artifacts(model_uri)  # the version exists but its folder is gone: say where it should be
        first = (err.message if isinstance(err, mlflow.exceptions.MlflowException) else str(err)).splitlines()[0]
        raise ModelNotFoundError(f"{model_uri} does not exist ({first}); "
                                 "ask for a registered version (`lakescore train` registers one)") from err
    config = dict(info.flavors.get("python_function", {}).get("config") or {})
    return _kinds_or_signature(config, info.signature.inputs), config


def loaded_input_kinds(model: Any) -> dict[str, str]:
    """:func:`model_input_kinds` of a model already loaded with ``mlflow.pyfunc.load_model``."""
    return _kinds_or_signature(model.model_config, model.metadata.get_input_schema())


def _kinds_or_signature(config: dict[str, Any] | None, inputs: Any) -> dict[str, str]:
    kinds = (config or {}).get("input_kinds")
    return dict(kinds) if kinds else input_kinds(inputs)


def null_outcomes(chain: FittedChain | ModelSet, example: pd.DataFrame, kinds: dict[str, str]) -> dict[str, str | None]:
    """What a null in each input column does to a row, found by scoring: input column -> the
    ``exclusion_reason`` a scorable row of ``example`` gets once that column is null, or None when
    the row is still predicted (the recipe imputes it, or the model takes it).

    Parameters
    ----------
    chain : FittedChain
    example : DataFrame of shape (n, >= len(chain.input_columns))
        Raw rows; the first one the chain predicts is blanked one column at a time. With none
        predicted, every outcome is None.
    kinds : dict of str to str
        :func:`input_kinds` of the signature: the blanked row is conformed like a scored one.

    Returns
    -------
    dict of str to str or None, in ``chain.input_columns`` order.
    """
    rows = example[list(chain.input_columns)]
    scored = chain.predict(rows)
    predicted = np.flatnonzero((scored["scoring_status"] == "predicted").to_numpy())
    if not len(predicted):
        return {c: None for c in chain.input_columns}
    row = rows.iloc[[int(predicted[0])]].astype(object)
    outcomes: dict[str, str | None] = {}
    for column in chain.input_columns:
        blank, _ = conform_inputs(row.assign(**{column: [None]}), kinds)
        reason = chain.predict(blank)["exclusion_reason"].iloc[0]
        outcomes[column] = None if pd.isna(reason) else str(reason)
    return outcomes


def null_counts(frame: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> dict[str, int]:
    """Null rows of each of ``columns`` in ``frame`` (the training rows), for the model config."""
    return {c: int(frame[c].isna().sum()) for c in columns if c in frame.columns}


@dataclass(frozen=True)
class RegisteredModel:
    """Where a logged model lives: registered name and version, run, artifact URI, certificate, and
    for a model set its components (:func:`component_record`)."""

    name: str
    version: int
    run_id: str
    model_uri: str
    certificate: Certificate
    components: tuple[dict[str, str], ...] = ()


def component_record(model_set: ModelSet, folder: Path) -> list[dict[str, str]]:
    """Each component of the set saved in ``folder``, in declared order: ``name``, ``model_class``,
    ``decision_threshold`` and ``digest``, the SHA-256 of its saved chain folder
    (``components/<name>/``): the component's version inside the registered version."""
    from lakescore.admission.certificate import folder_digest

    return [{"name": name, "model_class": chain.model_class, "decision_threshold": chain.decision_rule,
             "digest": folder_digest(folder / "components" / name)} for name, chain in model_set.components]


def log_and_register(chain: FittedChain | ModelSet, *, example: pd.DataFrame, name: str, alias: str | None,
                     evidence: dict[str, Any], training_nulls: dict[str, int] | None = None,
                     log_model: Any = None, note: str = "", extra_config: dict[str, Any] | None = None
                     ) -> RegisteredModel:
    """Save the chain, seal its certificate with the admission ``evidence``, log the pyfunc (with
    ``partition_probe.json``) in the active MLflow run, register it under ``name`` (the version's
    description says which decision threshold is in force: :func:`version_description`) and point
    ``alias`` at the new version.

    The model config holds ``input_kinds`` (:func:`input_kinds`), ``null_outcomes``
    (:func:`null_outcomes` on ``example``) and, when given, ``training_nulls``: what preflight
    reads to say what a null in a source column will do. The model's ``requirements.txt`` is
    :func:`lakescore.model_requirements.pip_requirements` (declared: MLflow does not load the model in
    a child process to infer it).

    Raises
    ------
    UncertifiedModelError
        Without admission evidence: packaging refuses to log a model that was not admitted.

    Parameters
    ----------
    example : DataFrame of shape (n, >= len(chain.input_columns))
        A few raw rows for the signature and input example.
    training_nulls : dict of str to int, optional
        Null rows per input column in the training rows (:func:`null_counts`); None when unknown.
    log_model : callable, optional
        What logs and registers the pyfunc, called like ``mlflow.pyfunc.log_model`` (the default);
        a lookup model on Databricks passes Feature Engineering's
        (:meth:`lakescore.runtime.feature_engineering.FeatureEngineering.model_logger`).
    note : str, default ""
        A paragraph appended to the version's description (split training: what the version covers).
    extra_config : dict, optional
        More model config keys (split training: ``split_training``, what the version covers).
    """
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # mlflow hints that integer inputs cannot hold nulls; the chain validates its own inputs
        warnings.filterwarnings("ignore", message=".*Inferred schema contains integer")
        chain_dir = chain.save(Path(tmp) / "chain")
        certificate = seal(chain_dir, chain, evidence=evidence)
        cert_path = Path(tmp) / "certificate.json"
        cert_path.write_text(certificate.to_json())
        evidence_path = Path(tmp) / "partition_probe.json"
        evidence_path.write_text(evidence_text(evidence))
        signature = signature_for(chain, example)
        kinds = input_kinds(typed_inputs(chain, example))
        components = component_record(chain, chain_dir) if isinstance(chain, ModelSet) else []
        config = {"input_kinds": kinds, "null_outcomes": null_outcomes(chain, example, kinds),
                  **({"training_nulls": dict(training_nulls)} if training_nulls is not None else {}),
                  **({"components": components} if components else {}), **(extra_config or {})}
        info = (log_model or mlflow.pyfunc.log_model)(
            name="model", python_model=str(Path(__file__).with_name("pyfunc_entry.py")),  # code, not a pickle
            model_config=config,
            artifacts={"chain": str(chain_dir), "certificate": str(cert_path), "evidence": str(evidence_path)},
            signature=signature, registered_model_name=name,
            input_example=example[list(chain.input_columns)].head(3),
            pip_requirements=pip_requirements(certificate.libraries, chain.engine),  # declared, not inferred
        )
    version = int(info.registered_model_version)
    description = "\n\n".join(filter(None, [version_description(chain, components), note]))
    mlflow.MlflowClient().update_model_version(name, str(version), description=description)
    if alias:
        mlflow.MlflowClient().set_registered_model_alias(name, alias, str(version))
    return RegisteredModel(name, version, info.run_id, f"models:/{name}/{version}", certificate, tuple(components))


def version_description(chain: FittedChain | ModelSet, components: list[dict[str, str]] | None = None) -> str:
    """The registered version's description: which decision threshold the sealed chain applies, e.g.
    ``Decision threshold in force: threshold 0.37 (optimize: f1 on 1,204 holdout rows; positive when
    p >= 0.37).``; for a model set one line per component (``components``: :func:`component_record`),
    ``Model set of 2 components: delay_model: LogisticRegression, decision threshold ..., digest 1f2e...``."""
    if not isinstance(chain, ModelSet) or isinstance(chain, PastingEnsemble):
        return f"Decision threshold in force: {chain.decision_rule}."
    lines = [f"- {c['name']}: {c['model_class']}, decision threshold {c['decision_threshold']}, digest {c['digest']}"
             for c in components or []]
    return "\n".join([f"Model set of {len(chain.components)} components:", *lines])


def resolve_version(name: str, *, selection: ModelSelection, version: int | None, alias: str = "champion") -> int:
    """The registered version to score: ``pinned_version`` -> ``version``; ``champion`` -> the
    version the registry ``alias`` (training.yml ``registry.alias``) points at.

    Raises
    ------
    ModelNotFoundError
        When the model, version or alias does not exist, with the fix for that case.
    """
    client = mlflow.MlflowClient()
    try:
        if selection == "pinned_version":
            client.get_model_version(name, str(version))
            return int(version)  # type: ignore[arg-type]
        return int(client.get_model_version_by_alias(name, alias).version)
    except mlflow.exceptions.MlflowException as err:
        if selection == "pinned_version":
            want, fix = f"version {version}", "fix model_version in inference.yml, or run `lakescore train`"
        else:
            want, fix = f"alias '{alias}'", "run `lakescore train` (it sets the alias), or pin model_version"
        raise ModelNotFoundError(
            f"registered model {name} has no {want} ({err.message.splitlines()[0]}). {fix.capitalize()}."
        ) from err


def read_certificate(model_uri: str) -> Certificate:
    """Download and parse the certificate of a logged model.

    Raises
    ------
    UncertifiedModelError
        When the model carries none.
    ModelArtifactsMissingError
        When the model's whole artifact folder is missing (naming the version and the folder).
    """
    try:
        from lakescore.model_uri import pyfunc_uri

        local = mlflow.artifacts.download_artifacts(f"{pyfunc_uri(model_uri)}/artifacts/certificate.json")
    except Exception as err:  # mlflow raises several types for a missing artifact
        from lakescore.model_uri import require_artifacts

        require_artifacts(model_uri)  # a missing folder is no missing certificate: say where it should be
        raise UncertifiedModelError(
            f"model {model_uri} has no certificate (artifacts/certificate.json); it cannot be scored "
            "in pieces. Retrain it with `lakescore train`."
        ) from err
    return Certificate.from_json(Path(local).read_text())
