"""Feature tables for the feature lookups, read through the runtime (training, serving, preview,
the single-node route and monitoring).

Training reads each feature table at its current version and records it in the chain; scoring
reads each at its CURRENT version too (not the one training read) and records it in the run
summary and the receipt. The join itself is :func:`lakescore.lookup.join_all` (pandas); the Spark
route joins in Spark (:func:`lakescore.workflows.routes.spark.spark_join_lookups`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakescore.errors import LakescoreError
from lakescore.lookup import FeatureLookup, join_all, lookup_inputs
from lakescore.runtime import Runtime


@dataclass(frozen=True)
class FeatureTables:
    """The feature tables of some lookups, each read at one version."""

    frames: dict[str, pd.DataFrame]
    versions: dict[str, int]

    def join(self, frame: pd.DataFrame, specs: tuple[FeatureLookup, ...] | list[FeatureLookup]) -> pd.DataFrame:
        """``frame`` with every lookup joined (:func:`lakescore.lookup.join_all`)."""
        return join_all(frame, self.frames, specs)

    def record(self) -> list[dict[str, object]]:
        """``[{"table": name, "version": n}, ...]`` in lookup order: what the summary and receipt show."""
        return [{"table": name, "version": version} for name, version in self.versions.items()]

    def training_rows(self, runtime: Runtime, table: str, *, version: int,
                      specs: tuple[FeatureLookup, ...] | list[FeatureLookup], label: str | None) -> pd.DataFrame:
        """Table ``table`` at ``version`` (pandas) with every lookup joined (:meth:`join`); ``label``
        is not needed here (the joins keep every column)."""
        return self.join(runtime.read_table(table, version=version), specs)

    def model_logger(self, input_columns: tuple[str, ...] | list[str]) -> None:
        """None: the model is logged by ``mlflow.pyfunc.log_model`` (this placement has no feature store)."""
        return None


def training_features(runtime: Runtime, specs: tuple[FeatureLookup, ...] | list[FeatureLookup]
                      ) -> FeatureTables | EngineeredFeatures:
    """The feature tables training joins, each version pinned now: read here and joined in pandas
    (:func:`read_feature_tables`), or, on a placement with a feature store (Databricks Feature
    Engineering, ``runtime.feature_engineering()``), joined by it (:class:`EngineeredFeatures`).

    Both give ``versions``, ``record()``, ``training_rows(...)`` and ``model_logger(...)``.
    """
    store = runtime.feature_engineering() if specs else None
    if store is None:
        return read_feature_tables(runtime, specs)
    names = dict.fromkeys(spec.table_name for spec in specs)
    return EngineeredFeatures(store, tuple(specs), {name: runtime.table_version(name) for name in names})


@dataclass
class EngineeredFeatures:
    """Training's feature lookups through Databricks Feature Engineering
    (:class:`lakescore.runtime.feature_engineering.FeatureEngineering`): the same interface as
    :class:`FeatureTables`, the join done by ``create_training_set``.

    Attributes
    ----------
    versions : dict of str to int
        Table -> version pinned when training started (the fingerprint's); checked again once the
        joined rows are read (Feature Engineering reads the current version).
    """

    store: Any
    specs: tuple[FeatureLookup, ...]
    versions: dict[str, int]
    rows: Any = None  # the Spark rows the training set joined onto (set by training_rows)
    label: str | None = None

    def record(self) -> list[dict[str, object]]:
        """As :meth:`FeatureTables.record`."""
        return [{"table": name, "version": version} for name, version in self.versions.items()]

    def training_rows(self, runtime: Runtime, table: str, *, version: int,
                      specs: tuple[FeatureLookup, ...] | list[FeatureLookup], label: str | None) -> pd.DataFrame:
        """Table ``table`` at ``version`` with every lookup joined by ``create_training_set(...).load_df()``,
        on the driver as pandas, in the table's read order (integers as ``Int64``).

        As the local joins give them, integer feature columns come out as float64, and a row that finds
        no feature row is kept with nulls. Every column of the table is kept: the row filter, the
        label expression and the pre-split recipe may read any of them.

        Parameters
        ----------
        label : str or None
            ``data.label_column``; handed to Feature Engineering as the label when it is a column of
            the table (a derived label is not).

        Raises
        ------
        FeatureLookupError
            A feature table moved from its pinned version before the join read it.
        """
        from pyspark.sql import functions as F  # Spark: only on this placement

        from lakescore.frames import nullable_pandas_type
        from lakescore.scoring.spark_lookup import INTEGER_TYPES

        order = "__lakescore_read_order__"
        self.rows = runtime.spark_source(table, version=version)
        self.label = label if label in self.rows.columns else None
        joined = self.store.training_set(self.rows.withColumn(order, F.monotonically_increasing_id()), specs,
                                         label=self.label).load_df()
        kinds = dict(joined.dtypes)
        outputs = {c for spec in specs for c in spec.output_columns}
        joined = joined.orderBy(order).select(*(F.col(c).cast("double").alias(c)
                                                if c in outputs and kinds[c] in INTEGER_TYPES else F.col(c)
                                                for c in joined.columns if c != order))
        frame = joined.toArrow().to_pandas(types_mapper=nullable_pandas_type)
        self.store.check_versions(self.versions, what="training")
        return frame

    def model_logger(self, input_columns: tuple[str, ...] | list[str]) -> Any:
        """Feature Engineering's ``log_model`` with a training set that describes exactly what the model
        reads at scoring: the rows' columns the chain takes (and the lookups' keys and timestamps),
        the lookups and the label; every other column is in ``exclude_columns``.

        Parameters
        ----------
        input_columns : sequence of str
            ``FittedChain.input_columns`` (lookup outputs included).
        """
        keep = set(lookup_inputs(self.specs, input_columns))
        exclude = [c for c in self.rows.columns if c not in keep and c != self.label]
        training_set = self.store.training_set(self.rows, self.specs, label=self.label, exclude_columns=exclude)
        return self.store.model_logger(training_set)


def read_feature_tables(runtime: Runtime, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                        versions: dict[str, int] | None = None) -> FeatureTables:
    """Each lookup's feature table at its current version (or the one ``versions`` pins), only the
    columns the lookups read.

    Parameters
    ----------
    runtime : Runtime
    specs : sequence of FeatureLookup
    versions : dict of str to int, optional
        Table name -> version to read (a score run pins them in preflight); default: current.

    Returns
    -------
    FeatureTables
        Table name -> frame and table name -> Delta version read (a table named by two lookups is
        read once, with the columns of both).
    """
    columns: dict[str, list[str]] = {}
    for spec in specs:
        columns[spec.table_name] = list(dict.fromkeys([*columns.get(spec.table_name, []), *spec.table_columns]))
    pinned = {name: (versions or {}).get(name, None) for name in columns}
    read = {name: runtime.table_version(name) if v is None else int(v) for name, v in pinned.items()}
    frames = {name: runtime.read_table(name, version=read[name], columns=cols) for name, cols in columns.items()}
    return FeatureTables(frames, read)


def lookup_problems(runtime: Runtime, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], empty: pd.DataFrame, *,
                    shown: str) -> tuple[pd.DataFrame, list[str]]:
    """``empty`` (a table's columns, no rows) with the lookups joined, and every problem found on
    the way (a feature table that does not exist, a column that is not there, a clashing output),
    each as ``<shown>: feature_lookups[i] (<table>): <why>``, read from metadata only."""
    problems: list[str] = []
    for i, spec in enumerate(specs):
        try:
            empty = join_all(empty, {spec.table_name: runtime.empty_frame(spec.table_name)}, [spec])
        except LakescoreError as err:  # TableNotFoundError and FeatureLookupError carry the fix
            problems.append(f"{shown}: feature_lookups[{i}] ({spec.table_name}): {err}")
    return empty, problems


def run_lookups(runtime: Runtime, receipt: dict[str, Any], model_version: int
                ) -> tuple[tuple[FeatureLookup, ...], dict[str, int]]:
    """The feature lookups of a published run's model version (its saved chain's specs) and the
    feature table versions the run joined (the receipt's ``feature_lookups``; a table it does not
    name: its current version), for monitoring the joined inputs. ``((), {})`` for a run without.
    """
    if not receipt.get("feature_lookups"):
        return (), {}
    from lakescore.saved_models import chain_meta  # mlflow: read the chain.json only

    meta = chain_meta(f"models:/{receipt['model_name']}/{int(model_version)}")
    specs = tuple(FeatureLookup.from_json(x["spec"]) for x in meta.get("feature_lookups", []))
    read = {entry["table"]: int(entry["version"]) for entry in receipt["feature_lookups"]}
    return specs, {spec.table_name: read.get(spec.table_name, runtime.table_version(spec.table_name))
                   for spec in specs}
