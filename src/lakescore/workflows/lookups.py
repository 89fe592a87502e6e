"""Feature tables for the feature lookups, read through the runtime (training and both scoring routes).

Training reads each feature table at its current version and records it in the chain; scoring
reads each at its CURRENT version too (not the one training read) and records it in the run
summary and the receipt. The join itself is :func:`lakescore.lookup.join_all` (pandas), or
:func:`lakescore.scoring.spark_lookup.spark_join_all` on the Spark route.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lakescore.errors import LakescoreError
from lakescore.lookup import FeatureLookup, join_all, lookup_inputs, same_time_type
from lakescore.runtime import Runtime
from lakescore.scoring.preflight import ScorePlan


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


def spark_join_lookups(runtime: Runtime, rows: Any, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                       versions: dict[str, int]) -> Any:
    """``rows`` with every lookup joined in Spark, lazily; each feature table read with the runtime's
    Spark reader (Delta ``versionAsOf``) at the version ``versions`` pins.

    Parameters
    ----------
    runtime : Runtime
    rows : pyspark.sql.DataFrame
        The rows to score (the pinned snapshot, or a window's inserted rows).
    specs : sequence of FeatureLookup
    versions : dict of str to int
        Table name -> Delta version to read (``ScorePlan.feature_tables``, pinned in preflight).

    Returns
    -------
    pyspark.sql.DataFrame
        As :func:`lakescore.scoring.spark_lookup.spark_join_all`; no row reaches the driver.

    Raises
    ------
    FeatureLookupError
        From :func:`lakescore.scoring.spark_lookup.spark_join_features` (a duplicate feature key, ...).
    """
    from lakescore.scoring.spark_lookup import spark_join_all  # pyspark: only on the Spark route

    names = dict.fromkeys(spec.table_name for spec in specs)
    tables = {name: runtime.spark_source(name, version=int(versions[name])) for name in names}
    return spark_join_all(rows, tables, specs)


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


def score_spark_route(runtime: Runtime, rows: Any, plan: ScorePlan, *, batch_rows: int, env_manager: str,
                      model_dir: Path, carry: tuple[str, ...]) -> Any:
    """The Spark route's scoring of ``rows`` (:func:`lakescore.scoring.spark.score_spark`), lazily,
    with the model's feature lookups joined where this placement joins them.

    - No lookups, or a placement without a feature store (``local``): the lookups joined in Spark
      (:func:`spark_join_lookups`, each table at the version preflight pinned), then the UDF.
    - Databricks Feature Engineering: ``score_batch`` on the rows (record keys, the source columns
      the model reads, the lookups' keys and ``carry``), with the same struct ``result_type`` and
      ``params`` as the UDF (so the same null-mask transport, decoded the same way). It joins each
      feature table at its current version; the versions preflight pinned are checked again once
      ``score_batch`` has resolved its reads (a commit after that, before the executors run, is not
      seen: the race accepted).

    Parameters
    ----------
    rows : pyspark.sql.DataFrame
        The rows to score (the pinned snapshot, or a window's inserted rows).
    plan : ScorePlan
    batch_rows, env_manager, model_dir, carry
        As :func:`lakescore.scoring.spark.score_spark`.

    Raises
    ------
    FeatureLookupError
        A duplicate feature key (local join), or a feature table that moved from its pinned version.
    """
    from lakescore.scoring.spark import exact_inputs, score_spark  # pyspark: only on the Spark route

    store = runtime.feature_engineering() if plan.feature_lookups else None
    if store is None:
        if plan.feature_lookups:
            rows = spark_join_lookups(runtime, rows, plan.lookups, versions=plan.feature_tables)
        return score_spark(rows, plan, batch_rows=batch_rows, env_manager=env_manager, model_dir=model_dir,
                           carry=carry)

    def score_batch(source: Any, *, result_type: str, params: dict[str, Any]) -> Any:
        from pyspark.sql import functions as F

        keys = list(dict.fromkeys([*plan.record_keys, *(c for spec in plan.lookups for c in spec.row_columns)]))
        inputs = [c for c in plan.source_columns if c not in keys]
        wanted = [*(F.col(c) for c in keys), *exact_inputs(source, inputs), *(F.col(c) for c in carry if c not in keys)]
        scored = store.score_batch(plan.model_uri, source.select(*wanted), result_type=result_type, params=params,
                                   env_manager=env_manager)
        store.check_versions(plan.feature_tables, what="scoring")
        return scored.select(*plan.record_keys, F.col("prediction").alias("_r"), *carry)

    return score_spark(rows, plan, batch_rows=batch_rows, env_manager=env_manager, model_dir=model_dir, carry=carry,
                       batch_scorer=score_batch)


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


def unmatched_rows(runtime: Runtime, source: str, specs: tuple[FeatureLookup, ...] | list[FeatureLookup], *,
                   version: int, versions: dict[str, int], spark: bool) -> dict[str, int]:
    """Per lookup, how many rows of ``source`` find no feature row (and so get nulls that the
    recipe imputes), counted where the rows are.

    Parameters
    ----------
    runtime : Runtime
    source : str
        The rows' table (three-part name), read at ``version``.
    specs : sequence of FeatureLookup
    version : int
        Delta version of ``source``.
    versions : dict of str to int
        Feature table name -> Delta version (a score run's ``ScorePlan.feature_tables``).
    spark : bool
        Count in Spark (one number reaches the driver) or, for the single-node route, in pandas.

    Returns
    -------
    dict of str to int
        ``"<table> by <keys>"`` -> rows without a feature row, in lookup order. A row misses when
        a key (or its timestamp) is null, no feature row has its key, or, point in time, the
        earliest feature row of its key is after the row's timestamp: the rows that
        :func:`lakescore.lookup.join_features` gives nulls.
    """
    count = _spark_unmatched if spark else _pandas_unmatched
    return {f"{spec.table_name} by {', '.join(spec.row_columns)}":
            count(runtime, source, spec, version=version, feature_version=int(versions[spec.table_name]))
            for spec in specs}


_FIRST = "__lakescore_first_feature_time__"


def _pandas_unmatched(runtime: Runtime, source: str, spec: FeatureLookup, *, version: int,
                      feature_version: int) -> int:
    keys = list(spec.lookup_key)
    rows = runtime.read_table(source, version=version, columns=list(spec.row_columns))
    table = runtime.read_table(spec.table_name, version=feature_version, columns=spec.table_key).dropna()
    firsts = (table.groupby(keys, as_index=False)[spec.feature_timestamp_key].min() if spec.point_in_time
              else table.drop_duplicates().assign(**{_FIRST: True}))
    if spec.point_in_time:
        firsts = firsts.rename(columns={spec.feature_timestamp_key: _FIRST})
    joined = rows.dropna().merge(firsts, how="left", on=keys)
    matched = joined[_FIRST].notna()
    if spec.point_in_time:  # compared as the join compares them (naive against aware: refused)
        when, first = same_time_type(joined[spec.timestamp_lookup_key], joined[_FIRST], spec)
        matched &= when >= first
    return int(len(rows) - matched.sum())


def _spark_unmatched(runtime: Runtime, source: str, spec: FeatureLookup, *, version: int,
                     feature_version: int) -> int:
    from pyspark.sql import functions as F  # pyspark: only on the Spark route

    keys = list(spec.lookup_key)
    rows = runtime.spark_source(source, version=version).select(*spec.row_columns)
    table = runtime.spark_source(spec.table_name, version=feature_version).select(*spec.table_key).dropna()
    if spec.point_in_time:
        firsts = table.groupBy(*keys).agg(F.min(spec.feature_timestamp_key).alias(_FIRST))
        matched = F.col(spec.timestamp_lookup_key) >= F.col(_FIRST)
    else:
        firsts = table.distinct().withColumn(_FIRST, F.lit(True))
        matched = F.col(_FIRST)
    joined = rows.join(firsts, on=keys, how="left")  # a null key matches nothing: _FIRST stays null
    return int(joined.where(F.coalesce(matched, F.lit(False)) == F.lit(False)).count())
