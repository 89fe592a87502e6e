"""Feature tables for the feature lookups, read through the runtime (training and both scoring routes).

Training reads each feature table at its current version and records it in the chain; scoring
reads each at its CURRENT version too (not the one training read) and records it in the run
summary and the receipt. The join itself is :func:`lakescore.lookup.join_all` (pandas), or
:func:`lakescore.scoring.spark_lookup.spark_join_all` on the Spark route.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakescore.errors import LakescoreError
from lakescore.lookup import FeatureLookup, join_all
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


def run_lookups(runtime: Runtime, receipt: dict[str, Any], model_version: int
                ) -> tuple[tuple[FeatureLookup, ...], dict[str, int]]:
    """The feature lookups of a published run's model version (its saved chain's specs) and the
    feature table versions the run joined (the receipt's ``feature_lookups``; a table it does not
    name: its current version), for monitoring the joined inputs. ``((), {})`` for a run without.
    """
    if not receipt.get("feature_lookups"):
        return (), {}
    from lakescore.scoring.preflight import chain_meta  # mlflow: read the chain.json only

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
    if spec.point_in_time:
        matched &= joined[spec.timestamp_lookup_key] >= joined[_FIRST]
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
