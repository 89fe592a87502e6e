"""A stand-in for ``databricks.feature_engineering`` (what a workspace provides), for the tests.

It keeps the real package's call signatures and model layout (``log_model`` saves the given pyfunc
as the raw model under ``data/feature_store/raw_model`` of a wrapper whose loader module is
``databricks.feature_store.mlflow_model``, then registers ``runs:/<run>/<artifact_path>``;
``score_batch`` joins the feature spec's lookups, then runs the raw model in ``spark_udf`` with the
caller's ``result_type`` and ``params`` into a ``prediction`` column), and records every call in
:data:`CALLS`. Its joins are its own, written independently of lakescore's: a left join on the keys,
and for a point-in-time lookup the latest feature row at or before the row's time, picked with a
window over a row id. Feature tables are read by name on the active local SparkSession (the real
Delta tables), at their current version, as Feature Engineering reads them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

CALLS: list[tuple[str, dict[str, Any]]] = []


class FeatureLookup:
    def __init__(self, table_name: str, lookup_key: Any, *, feature_names: Any = None,
                 rename_outputs: dict[str, str] | None = None, timestamp_lookup_key: str | None = None,
                 lookback_window: Any = None, default_values: Any = None) -> None:
        self.table_name, self.lookup_key = table_name, [lookup_key] if isinstance(lookup_key, str) else list(lookup_key)
        self.feature_names, self.rename_outputs = list(feature_names or []), dict(rename_outputs or {})
        self.timestamp_lookup_key = timestamp_lookup_key

    def to_json(self) -> dict[str, Any]:
        return {"table_name": self.table_name, "lookup_key": self.lookup_key, "feature_names": self.feature_names,
                "rename_outputs": self.rename_outputs, "timestamp_lookup_key": self.timestamp_lookup_key}


def _spark() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def _join(df: Any, lookups: list[FeatureLookup]) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    for lookup in lookups:
        outputs = [lookup.rename_outputs.get(name, name) for name in lookup.feature_names]
        ts = lookup.timestamp_lookup_key
        table = _spark().read.table(lookup.table_name).select(
            *(F.col(k).alias(f"_fk_{k}") for k in lookup.lookup_key), *([F.col(ts).alias("_fts")] if ts else []),
            *(F.col(n).alias(o) for n, o in zip(lookup.feature_names, outputs)))
        condition = [F.col(k) == F.col(f"_fk_{k}") for k in lookup.lookup_key]
        if ts is None:
            df = df.join(table, on=condition, how="left")
        else:
            rid = df.withColumn("_rid", F.monotonically_increasing_id())
            matched = rid.join(table, on=[*condition, F.col("_fts") <= F.col(ts)], how="left")
            rank = F.row_number().over(Window.partitionBy("_rid").orderBy(F.col("_fts").desc_nulls_last()))
            df = matched.withColumn("_rank", rank).where("_rank = 1").drop("_rank", "_rid", "_fts")
        df = df.drop(*(f"_fk_{k}" for k in lookup.lookup_key))
    return df


class TrainingSet:
    def __init__(self, df: Any, lookups: list[FeatureLookup], label: Any, exclude_columns: list[str]) -> None:
        self.df, self.lookups, self.label, self.exclude_columns = df, lookups, label, exclude_columns

    def load_df(self) -> Any:
        return _join(self.df, self.lookups).drop(*self.exclude_columns)

    def source_columns(self) -> list[str]:
        labels = [self.label] if isinstance(self.label, str) else list(self.label or [])
        return [c for c in self.df.columns if c not in self.exclude_columns and c not in labels]


class FeatureEngineeringClient:
    def create_training_set(self, *, df: Any, feature_lookups: list[FeatureLookup], label: Any,
                            exclude_columns: list[str] | None = None, **kwargs: Any) -> TrainingSet:
        CALLS.append(("create_training_set", {"df": df, "feature_lookups": feature_lookups, "label": label,
                                              "exclude_columns": exclude_columns, **kwargs}))
        return TrainingSet(df, feature_lookups, label, list(exclude_columns or []))

    def log_model(self, *, model: Any, artifact_path: str, flavor: types.ModuleType, training_set: TrainingSet,
                  registered_model_name: str | None = None, **kwargs: Any) -> Any:
        import mlflow
        from mlflow.models import ModelSignature

        CALLS.append(("log_model", {"model": model, "artifact_path": artifact_path, "flavor": flavor,
                                    "training_set": training_set, "registered_model_name": registered_model_name,
                                    **kwargs}))
        output_schema = kwargs.pop("output_schema", None)
        kwargs.pop("params", None)
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "feature_store"
            flavor.save_model(str(data / "raw_model"), python_model=model, **kwargs)
            spec = {"lookups": [x.to_json() for x in training_set.lookups],
                    "source_columns": training_set.source_columns()}
            (data / "feature_spec.json").write_text(json.dumps(spec))
            info = mlflow.pyfunc.log_model(name=artifact_path, loader_module="databricks.feature_store.mlflow_model",
                                           data_path=str(data), signature=ModelSignature(inputs=None,
                                                                                         outputs=output_schema))
        if registered_model_name is not None:
            mlflow.register_model(f"runs:/{info.run_id}/{artifact_path}", registered_model_name)
        return info

    def score_batch(self, *, model_uri: str, df: Any, result_type: str = "double", env_manager: str = "local",
                    params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        import mlflow
        from pyspark.sql import functions as F

        CALLS.append(("score_batch", {"model_uri": model_uri, "df": df, "result_type": result_type,
                                      "env_manager": env_manager, "params": params, **kwargs}))
        if "prediction" in df.columns:
            raise ValueError('df already has a column with name "prediction".')
        local = Path(mlflow.artifacts.download_artifacts(model_uri, dst_path=tempfile.mkdtemp()))
        spec = json.loads((local / "data" / "feature_store" / "feature_spec.json").read_text())
        lookups = [FeatureLookup(**x) for x in spec["lookups"]]
        missing = [c for c in spec["source_columns"] if c not in df.columns]
        if missing:
            raise ValueError(f"DataFrame is missing required columns {missing}.")
        outputs = [lookup.rename_outputs.get(n, n) for lookup in lookups for n in lookup.feature_names]
        udf = mlflow.pyfunc.spark_udf(_spark(), str(local / "data" / "feature_store" / "raw_model"),
                                      result_type=result_type, env_manager=env_manager, params=params)
        inputs = [*spec["source_columns"], *(c for c in outputs if c not in spec["source_columns"])]
        augmented = _join(df, lookups).withColumn("prediction", udf(F.struct(*inputs)))
        return augmented.select(*df.columns, *(c for c in outputs if c not in df.columns), "prediction")


def install(monkeypatch: Any) -> types.ModuleType:
    """Put this fake in ``sys.modules`` as ``databricks.feature_engineering`` (undone by ``monkeypatch``)."""
    module = types.ModuleType("databricks.feature_engineering")
    module.FeatureLookup = FeatureLookup  # type: ignore[attr-defined]
    module.FeatureEngineeringClient = FeatureEngineeringClient  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "databricks.feature_engineering", module)
    CALLS.clear()
    return module
