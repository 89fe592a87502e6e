"""Where lakescore's pyfunc sits inside a logged model.

A model logged with ``mlflow.pyfunc.log_model`` is the pyfunc itself: its ``MLmodel``, then
``artifacts/chain``, ``artifacts/certificate.json``, ... at the model's root. A model logged
through Databricks Feature Engineering (the databricks placement's feature lookups,
:mod:`lakescore.runtime.feature_engineering`) is Feature Engineering's wrapper, whose loader
module joins the features and then calls the raw model it saved under
``data/feature_store/raw_model``: that raw model is lakescore's pyfunc, with the same artifacts.
Everything that reads the certificate, the chain or the model config goes through
:func:`pyfunc_uri`.
"""

from __future__ import annotations

from typing import Any

FE_LOADER_MODULE = "databricks.feature_store.mlflow_model"  # Feature Engineering's wrapper (0.x)
FE_RAW_MODEL = "data/feature_store/raw_model"


def pyfunc_uri(model_uri: str) -> str:
    """The URI of lakescore's pyfunc in the model at ``model_uri``.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>``, ``runs:/...`` or a folder.

    Returns
    -------
    str
        ``model_uri`` itself, or ``<model_uri>/data/feature_store/raw_model`` when its ``MLmodel``
        says Feature Engineering's loader module wraps it. A model whose ``MLmodel`` cannot be read
        gives ``model_uri`` unchanged: the caller's own read then reports it with its fix.
    """
    import mlflow  # heavy: only where models are read

    try:
        flavor = mlmodel(model_uri).flavors.get("python_function") or {}
    except (mlflow.exceptions.MlflowException, OSError):
        return model_uri
    if flavor.get("loader_module") == FE_LOADER_MODULE:
        return f"{model_uri.rstrip('/')}/{FE_RAW_MODEL}"
    return model_uri


def mlmodel(model_uri: str) -> Any:
    """The ``MLmodel`` (``mlflow.models.Model``: flavors, signature) of the model at ``model_uri``,
    which may be a sub-path of a registered model (``models:/<name>/<version>/data/...``, which
    ``mlflow.models.get_model_info`` refuses).

    Raises
    ------
    mlflow.exceptions.MlflowException
        Nothing is logged there.
    """
    import mlflow  # heavy: only where models are read
    from mlflow.models import Model

    return Model.load(mlflow.artifacts.download_artifacts(f"{model_uri.rstrip('/')}/MLmodel"))


def pyfunc_mlmodel(model_uri: str) -> Any:
    """:func:`mlmodel` of lakescore's pyfunc in the model at ``model_uri`` (:func:`pyfunc_uri`)."""
    return mlmodel(pyfunc_uri(model_uri))


def require_artifacts(model_uri: str) -> None:
    """Refuse a model whose recorded artifact folder is a local path that does not exist.

    Called where reading a model failed, to tell a missing folder (a home moved or copied without
    its artifacts) from a model that lacks a file. Returns quietly when the folder exists, when the
    artifacts are not in a local folder (``dbfs:/``, Unity Catalog, ...) or when ``model_uri``
    does not resolve to a logged model (the caller's own error says that).

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>[/sub/path]``, ``models:/<name>@<alias>`` or ``models:/<model id>``.

    Raises
    ------
    ModelArtifactsMissingError
        Naming the version and the folder the registry expects (code ``model_artifacts_missing``).
    """
    from mlflow.store.artifact.models_artifact_repo import ModelsArtifactRepository  # heavy: only where models are read

    from lakescore.errors import ModelArtifactsMissingError
    from lakescore.runtime.relocation import file_uri_path

    if not model_uri.startswith("models:"):
        return
    base, _ = ModelsArtifactRepository.split_models_uri(model_uri)  # type: ignore[no-untyped-call]  # mlflow's, unannotated
    try:
        location = ModelsArtifactRepository.get_underlying_uri(base)  # type: ignore[no-untyped-call]  # as above
    except Exception:  # noqa: BLE001 (any registry failure: the caller's own error is the one to raise)
        return
    path = file_uri_path(location)
    if path is not None and not path.exists():
        raise ModelArtifactsMissingError.at(base, str(path))
