"""What an endpoint will serve, resolved once when it starts: the pinned version, its input
columns and its task. Moving the ``champion`` alias later does not change the plan (an endpoint
that follows the alias only marks itself stale); a redeploy (``POST /deploy``) does.

The registry reads here need MLflow (~125 MB of imports with its SQL store). The endpoint process
holds no model, so once it has a fork server (:mod:`lakescore.serving.forkserver`) and has told its
children where the registry is (``MLFLOW_TRACKING_URI`` in ``forkserver.child_env``), each read
runs in a child forked from it, which has MLflow's pyfunc imported already and imports the SQL
store itself (the fork server does not hold it: replicas never read the registry), and the endpoint
never imports MLflow; any other process reads in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lakescore.config import ModelSelection, ProjectConfig, ServingConfig
from lakescore.errors import ConfigError, LakescoreError


@dataclass(frozen=True)
class EndpointPlan:
    """The pinned version and everything the endpoint needs to know about it."""

    name: str
    model_name: str
    version: int
    selection: ModelSelection
    input_columns: dict[str, str]
    task: str
    settings: ServingConfig
    home: Path
    tracking_uri: str
    training_table: str
    training_filter: str | None
    alias: str = "champion"
    lookups: tuple[dict[str, Any], ...] = ()  # the version's feature lookup specs (FeatureLookup.to_json)

    @property
    def model_uri(self) -> str:
        """The pinned version's ``models:/`` URI."""
        return f"models:/{self.model_name}/{self.version}"

    @property
    def follows_alias(self) -> bool:
        """Whether the endpoint follows the registry alias (``model_selection: champion``), and so is
        stale when the alias moves; a version pinned in serving.yml or by a deploy never is."""
        return self.selection == "champion"

    def deployed(self, version: int, *, input_columns: dict[str, str], task: str, alias_version: int | None,
                 lookups: tuple[dict[str, Any], ...] = ()) -> EndpointPlan:
        """The plan after ``POST /deploy {"version": version}`` (``lookups``: its feature lookup specs).

        It keeps following the alias when it did and ``version`` is the alias's version now
        (``alias_version``); otherwise the deployed version is pinned (``selection`` ``deploy``).
        """
        follows = self.follows_alias and version == alias_version
        return replace(self, version=version, input_columns=input_columns, task=task, lookups=tuple(lookups),
                       selection=self.selection if follows else "deploy")  # type: ignore[arg-type]  # 'deploy' is a selection EndpointPlan.selection's Literal does not list yet

    def uri(self, version: int) -> str:
        """``models:/<model_name>/<version>``."""
        return f"models:/{self.model_name}/{version}"

    def summary(self) -> dict[str, Any]:
        s = self.settings
        return {"endpoint": self.name, "model": self.model_uri, "pinned_by": self.selection, "task": self.task,
                "replicas": {"min": s.replicas.min, "max": s.replicas.max}, "keep_warm": s.keep_warm,
                "profile": s.profile, "inference_table": s.inference_table, "host": s.host, "port": s.port,
                **({"feature_lookups": [x["table_name"] for x in self.lookups]} if self.lookups else {})}


def input_columns(model_uri: str) -> dict[str, str]:
    """Input column name -> type (``long``, ``double``, ``string``, ...) of a request to a registered
    model version: its signature (:func:`lakescore.packaging.model_input_kinds`), or for a version
    with feature lookups the row's own columns (:func:`lakescore.serving.features.request_columns`).

    Raises
    ------
    ModelNotFoundError
        When the version does not exist.
    """
    return _registry(_input_columns, model_uri)


def certified_columns(model_uri: str) -> dict[str, str]:
    """:func:`input_columns` of a version that carries a certificate (what a deploy may serve).

    Raises
    ------
    ModelNotFoundError
        When the version does not exist.
    UncertifiedModelError
        When it has no certificate.
    """
    return _registry(_certified_columns, model_uri)


def model_task(model_uri: str) -> str:
    """The task (``classification`` | ``regression``) recorded in the version's saved chain;
    ``model_set`` for a model set (each component has its own)."""
    return _registry(_model_task, model_uri)


def saved_description(model_uri: str) -> dict[str, Any]:
    """The version's saved description: its ``chain.json``, or for a model set its ``set.json`` with
    ``task`` ``model_set`` (what :func:`lakescore.serving.policy.shadow.compared_columns` reads)."""
    return _registry(_saved_model, model_uri)


def model_lookups(model_uri: str) -> list[dict[str, Any]]:
    """The feature lookup specs (``FeatureLookup.to_json``) the version's saved chain joins
    (training.yml ``feature_lookups``), in join order; empty: none."""
    return _registry(_model_lookups, model_uri)


def alias_version(model_name: str, alias: str) -> int | None:
    """The version ``alias`` points at, or None when the model or alias does not exist (deleting
    the version an alias points at deletes the alias).

    Raises
    ------
    mlflow.exceptions.MlflowException
        The registry cannot be read.
    """
    return _registry(_alias_version, model_name, alias)


@dataclass(frozen=True)
class RegistryView:
    """What the stale check reads in one registry visit (:func:`registry_view`).

    Attributes
    ----------
    alias_version : int or None
        The version the alias points at now; None when it does not resolve, or was not asked.
    version_registered : bool
        Whether the served version is still in the registry (False: it was deleted).
    """

    alias_version: int | None
    version_registered: bool


def registry_view(model_name: str, version: int, *, alias: str | None) -> RegistryView:
    """Whether ``version`` is still registered and, with ``alias``, the version it points at (one
    registry read, in a child of the fork server where there is one).

    Raises
    ------
    mlflow.exceptions.MlflowException
        The registry cannot be read (a missing version or alias is an answer, not an error).
    """
    return _registry(_registry_view, model_name, version, alias)


def artifact_location(model_name: str, version: int, *, tracking_uri: str | None = None) -> str:
    """Where the registered version's files are (``MlflowClient.get_model_version_download_uri``:
    a ``file://`` folder on the local runtime). A replica loads its model from there, so it needs no
    registry read and no registry client (the SQL store's ~45 MB of imports); the certificate is
    verified at load exactly as for ``models:/<name>/<version>``, whose files these are.

    Raises
    ------
    mlflow.exceptions.MlflowException
        The version does not exist or the registry cannot be read.

    ``tracking_uri`` (a replica backend's) names the registry to read when it is the local SQLite
    store, whose registry is the tracking store: never the process's default, which an earlier
    endpoint or run of the same process may have pointed elsewhere.
    """
    return _registry(_artifact_location, model_name, version, tracking_uri)


REGISTRY_TIMEOUT_S = 120.0


def _registry(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)`` in a child of this process's fork server once the endpoint gave its children
    the registry's URIs (``forkserver.child_env``; the server is started again if it died), else here.

    Never here once the URIs went to the children only: this process's MLflow was never pointed at
    the registry, so its default (``./mlflow.db`` in the working directory, created empty) would
    answer that every version is missing.
    """
    from lakescore.serving import forkserver

    if forkserver.child_env.get("MLFLOW_TRACKING_URI"):
        return forkserver.call(read, *args, timeout_s=REGISTRY_TIMEOUT_S, what=f"registry read {args[0]}")
    return read(*args)


def _input_columns(model_uri: str) -> dict[str, str]:
    from lakescore.packaging import model_input_kinds  # registry access
    from lakescore.serving.features import request_columns

    kinds = model_input_kinds(model_uri)  # ModelNotFoundError before the chain is read
    return request_columns(kinds, _model_lookups(model_uri))


def _certified_columns(model_uri: str) -> dict[str, str]:
    from lakescore.packaging import read_certificate  # registry access

    columns = _input_columns(model_uri)  # ModelNotFoundError first, then the certificate
    read_certificate(model_uri)
    return columns


def _saved_model(model_uri: str) -> dict[str, Any]:
    """The version's saved chain description: ``chain.json``, or for a model set its ``set.json``
    (:mod:`lakescore.model_set`) with ``task`` ``model_set`` (read as every route reads it:
    :func:`lakescore.saved_models.chain_meta`)."""
    from lakescore.saved_models import chain_meta  # registry access

    saved = chain_meta(model_uri)
    return {**saved, "task": "model_set"} if "components" in saved else saved


def _model_task(model_uri: str) -> str:
    return str(_saved_model(model_uri)["task"])


def _model_lookups(model_uri: str) -> list[dict[str, Any]]:
    return [dict(x["spec"]) for x in _saved_model(model_uri).get("feature_lookups", [])]


def _artifact_location(model_name: str, version: int, tracking_uri: str | None = None) -> str:
    import mlflow  # registry access

    local = tracking_uri is not None and tracking_uri.startswith("sqlite:")
    client = mlflow.MlflowClient(tracking_uri, registry_uri=tracking_uri) if local else mlflow.MlflowClient()
    return str(client.get_model_version_download_uri(model_name, str(version)))


# What a registry answers for a missing model, version or alias (MLflow's SQL store says
# INVALID_PARAMETER_VALUE for an alias it does not have; Unity Catalog says NOT_FOUND).
_NOT_FOUND = ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND")
_ALIAS_NOT_FOUND = (*_NOT_FOUND, "INVALID_PARAMETER_VALUE")


def _alias_version(model_name: str, alias: str) -> int | None:
    import mlflow  # registry access

    try:
        return int(mlflow.MlflowClient().get_model_version_by_alias(model_name, alias).version)
    except mlflow.exceptions.MlflowException as err:
        if err.error_code in _ALIAS_NOT_FOUND:
            return None
        raise


def _registry_view(model_name: str, version: int, alias: str | None) -> RegistryView:
    import mlflow  # registry access

    try:
        mlflow.MlflowClient().get_model_version(model_name, str(version))
        registered = True
    except mlflow.exceptions.MlflowException as err:
        if err.error_code not in _NOT_FOUND:
            raise
        registered = False
    return RegistryView(None if alias is None else _alias_version(model_name, alias), registered)


def plan_endpoint(project: ProjectConfig, *, home: Path) -> EndpointPlan:
    """Resolve the version an endpoint pins (``model_selection`` in serving.yml) and read its
    input columns and task from the registry MLflow points at (``runtime.mlflow()`` first).

    Parameters
    ----------
    project : ProjectConfig
    home : Path
        The runtime's home, where the endpoint keeps its state.

    Raises
    ------
    ConfigError
        When serving.yml is missing, or the model, version or alias does not exist, or the version
        has no certificate.

    Notes
    -----
    A version with feature lookups is served with requests that carry the row's own columns
    (``input_columns`` is then :func:`lakescore.serving.features.request_columns`) and its specs in
    ``lookups``; the endpoint reads the feature tables when it starts.
    """
    from lakescore.packaging import read_certificate, resolve_version

    settings = project.serving
    if settings is None:
        raise ConfigError([f"{project.config_dir.name}/serving.yml: file not found; create it (see config/)"])
    name = project.training.registry.model_name
    try:
        version = resolve_version(name, selection=settings.model_selection, version=settings.model_version,
                                  alias=project.training.registry.alias)
        read_certificate(f"models:/{name}/{version}")
        columns = input_columns(f"models:/{name}/{version}")
        task, lookups = model_task(f"models:/{name}/{version}"), model_lookups(f"models:/{name}/{version}")
    except LakescoreError as err:
        raise ConfigError([f"{project.config_dir.name}/serving.yml: model_selection "
                           f"{settings.model_selection!r}: {err.code}: {err}"]) from err
    return EndpointPlan(
        name=settings.endpoint_name, model_name=name, version=version, selection=settings.model_selection,
        input_columns=columns, task=task, settings=settings, home=home,
        tracking_uri=_tracking_uri(), training_table=project.training.data.table,
        training_filter=project.training.data.filter, alias=project.training.registry.alias,
        lookups=tuple(lookups),
    )


def _tracking_uri() -> str:
    import mlflow  # pointed at the registry by runtime.mlflow()

    return str(mlflow.get_tracking_uri())
