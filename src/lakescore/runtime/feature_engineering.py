"""Databricks Feature Engineering: the databricks placement's feature lookups (training set, model
logging with the feature spec, batch scoring), the one place that imports
``databricks.feature_engineering``.

DBR ML ships the package; lakescore does not depend on it, and imports it only here, lazily, when
a model with feature lookups is trained or scored on a workspace. Three calls, each a thin
translation of lakescore's own objects:

- :meth:`FeatureEngineering.training_set`: ``create_training_set(df=<Spark rows>,
  feature_lookups=[FeatureLookup(...)], label=..., exclude_columns=...)``; ``load_df()`` of it
  gives the joined rows.
- :meth:`FeatureEngineering.model_logger`: a drop-in for ``mlflow.pyfunc.log_model`` that calls
  ``log_model(model=..., artifact_path=..., flavor=mlflow.pyfunc, training_set=...,
  registered_model_name=..., <our artifacts, model_config, signature, input_example>)``, so Unity
  Catalog records lineage and the registered version carries ``feature_spec.yaml``. Feature
  Engineering saves our pyfunc (chain, certificate, evidence) as its raw model under
  :data:`lakescore.model_uri.FE_RAW_MODEL`, and ``score_batch`` runs exactly that pyfunc.
- :meth:`FeatureEngineering.score_batch`: ``score_batch(model_uri=..., df=..., result_type=...,
  params=..., env_manager=...)``; it joins the lookups at the feature tables' current versions
  and runs the raw model in ``mlflow.pyfunc.spark_udf`` with our ``result_type`` and ``params``.

What it cannot say: Feature Engineering reads each feature table at its CURRENT version and takes
no version. lakescore pins the versions first (preflight, or the training fingerprint) and checks
them again after the read (:meth:`FeatureEngineering.check_versions`): versions only grow, so
equal before and after means the join read the pinned ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from lakescore.errors import FeatureLookupError, RuntimeUnsupportedError

if TYPE_CHECKING:  # the spec is a core value object; only its fields are read here
    from lakescore.config import EnvManager
    from lakescore.lookup import FeatureLookup

FE_MODULE = "databricks.feature_engineering"
FE_ARTIFACT_PATH = "model"  # the run-relative path of the logged model, as lakescore's own log_model uses


def fe_module() -> Any:
    """``databricks.feature_engineering``, imported now.

    Raises
    ------
    RuntimeUnsupportedError
        The package is not installed (it ships with Databricks Runtime for Machine Learning).
    """
    import importlib

    try:
        return importlib.import_module(FE_MODULE)
    except ImportError as err:
        raise RuntimeUnsupportedError(
            "a model with feature_lookups goes through Databricks Feature Engineering on the databricks placement, "
            f"but {FE_MODULE} does not import here ({err}). Run the job on Databricks Runtime for Machine Learning "
            "(it ships databricks-feature-engineering), or add it to the job's environment.") from err


def fe_lookups(specs: Sequence[FeatureLookup]) -> list[Any]:
    """Feature Engineering ``FeatureLookup`` objects for lakescore's specs, field by field.

    ``feature_timestamp_key`` has no counterpart: Feature Engineering takes the feature table's
    timeseries primary key column (``PRIMARY KEY (..., ts TIMESERIES)``), which must be that column.
    """
    module = fe_module()
    return [module.FeatureLookup(table_name=spec.table_name, lookup_key=list(spec.lookup_key),
                                 feature_names=list(spec.feature_names),
                                 rename_outputs=dict(spec.rename_outputs) or None,
                                 timestamp_lookup_key=spec.timestamp_lookup_key) for spec in specs]


@dataclass
class FeatureEngineering:
    """The Feature Engineering client of a workspace session.

    Parameters
    ----------
    versions_now : callable of str to int
        The current Delta version of a table (``DatabricksRuntime.table_version``).
    """

    versions_now: Callable[[str], int]
    _client: Any = None

    def client(self) -> Any:
        """The ``FeatureEngineeringClient`` (made on first use)."""
        if self._client is None:
            self._client = fe_module().FeatureEngineeringClient()
        return self._client

    def training_set(self, rows: Any, specs: Sequence[FeatureLookup], *, label: str | None,
                     exclude_columns: Sequence[str] = ()) -> Any:
        """``create_training_set`` of ``rows`` (a Spark DataFrame) with the lookups of ``specs``.

        Returns
        -------
        databricks.ml_features.training_set.TrainingSet
            Lazy; ``load_df()`` gives ``rows``' columns (minus ``exclude_columns``), then each
            lookup's output columns.
        """
        return self.client().create_training_set(df=rows, feature_lookups=fe_lookups(specs), label=label,
                                                 exclude_columns=list(exclude_columns))

    def check_versions(self, pinned: dict[str, int], *, what: str) -> None:
        """Refuse when a feature table moved from its pinned version (Feature Engineering then read a
        later one than lakescore records).

        Raises
        ------
        FeatureLookupError
            Naming the table, both versions and the fix (run again).
        """
        for name, version in pinned.items():
            now = self.versions_now(name)
            if now != int(version):
                raise FeatureLookupError(
                    f"feature table {name} moved from v{version} to v{now} while {what} read it through Feature "
                    "Engineering, which reads the current version; the recorded version would be wrong. Run it "
                    "again (or pause the feature table's writer).", table=name, pinned=int(version), now=now)

    def model_logger(self, training_set: Any) -> Callable[..., Any]:
        """A stand-in for ``mlflow.pyfunc.log_model(name=..., python_model=..., registered_model_name=...,
        signature=..., **kwargs)`` that logs through Feature Engineering's ``log_model`` with
        ``training_set``.

        Returns
        -------
        callable
            Returning an object with ``run_id`` and ``registered_model_version`` (Feature
            Engineering registers the model itself and returns no version: it is found by the
            run id).
        """

        def log_model(*, name: str, python_model: Any, registered_model_name: str, signature: Any,
                      **kwargs: Any) -> Any:
            import mlflow  # heavy: only where models are logged

            info = self.client().log_model(
                model=python_model, artifact_path=name, flavor=mlflow.pyfunc, training_set=training_set,
                registered_model_name=registered_model_name, signature=signature,
                output_schema=signature.outputs,  # the wrapper's outputs: ours, not the label's
                **kwargs)
            run_id = info.run_id if info is not None else mlflow.active_run().info.run_id  # type: ignore[union-attr]  # log_model ran inside the active run
            found = [int(v.version) for v in mlflow.MlflowClient().search_model_versions(f"run_id = '{run_id}'")
                     if v.name == registered_model_name]
            if not found:
                raise RuntimeUnsupportedError(
                    f"Feature Engineering log_model registered no version of {registered_model_name} from run "
                    f"{run_id}; check that the principal may create model versions there.",
                    model=registered_model_name)
            return SimpleNamespace(run_id=run_id, registered_model_version=max(found))

        return log_model

    def score_batch(self, model_uri: str, rows: Any, *, result_type: str, params: dict[str, Any],
                    env_manager: EnvManager) -> Any:
        """``score_batch``: ``rows`` with the model's lookups joined (current versions) and its
        output in a ``prediction`` column of type ``result_type``, lazily."""
        return self.client().score_batch(model_uri=model_uri, df=rows, result_type=result_type, params=params,
                                         env_manager=env_manager)
