"""Feature lookups on the Spark route: the join of :mod:`lakescore.lookup`, done in Spark before the UDF.

Same spec, same result as the pandas join (:func:`lakescore.lookup.join_features`): a left join, so
every source row comes out exactly once; a row whose key (or timestamp) is null or finds no feature
row gets nulls; feature rows with a null key (or timestamp) never match; integer feature columns
come out as double (the pandas join gives the chain float64); a feature table with two rows for one
key (and timestamp) is refused. Point in time: per row, the feature row with the same key and the
latest ``feature_timestamp_key`` at or before the row's ``timestamp_lookup_key``, never after.

The point-in-time match is found per distinct ``(key, timestamp)`` pair of the source, not per row:
the pairs are joined to the feature rows at or before their timestamp and reduced with
``max_by(features, feature_timestamp)`` (one feature row per key and timestamp, so no tie), then
the source is left-joined to that mapping on ``(key, timestamp)``, which is unique in it: no row id
and no window over the source rows, and no source row is dropped or repeated. No row reaches the
driver; the duplicate check brings back one aggregate row.
"""

from __future__ import annotations

from typing import Any

from lakescore.lookup import FeatureLookup, check_columns, duplicate_key_error, time_type_error, time_zone_error

_F = "__lakescore_feature__"  # prefix of the feature table's columns inside the join (no clash with the rows')
_V = "__lakescore_value_"  # struct field names of the latest feature row


def spark_join_features(rows: Any, features: Any, spec: FeatureLookup) -> Any:
    """``rows`` with the feature columns of ``spec`` joined on by key (a left join), lazily.

    Parameters
    ----------
    rows : pyspark.sql.DataFrame of shape (n_rows, n_columns)
        The rows to score; must carry ``spec.row_columns`` and none of ``spec.output_columns``.
    features : pyspark.sql.DataFrame
        The feature table (read at one version, e.g. Delta ``versionAsOf``).
    spec : FeatureLookup

    Returns
    -------
    pyspark.sql.DataFrame of shape (n_rows, n_columns + len(spec.feature_names))
        ``rows``' columns, then the output columns in ``feature_names`` order (renamed per
        ``rename_outputs``); integer features as double; in no particular row order.

    Raises
    ------
    FeatureLookupError
        As :func:`lakescore.lookup.join_features`: a missing or clashing column, two feature rows
        for one key (and timestamp; found by one ``groupBy(...).count()`` over the feature table),
        or (point in time) timestamp columns that are not both numbers or both times.
    """
    from pyspark.sql import functions as F  # pyspark: only on the Spark route

    check_columns(spec, rows.columns, features.columns)
    table = features.select(*spec.table_columns).dropna(subset=spec.table_key)
    _refuse_duplicates(table, spec)
    outputs = spec.output_columns
    values = table.select(*(F.col(c).alias(_F + c) for c in spec.table_columns))
    found = _latest(rows, values, spec) if spec.point_in_time else values.select(
        *(F.col(_F + k).alias(k) for k in spec.lookup_key),
        *(F.col(_F + name).alias(out) for name, out in zip(spec.feature_names, outputs)))
    on = list(spec.row_columns)
    joined = rows.join(found, on=on, how="left")  # ``on`` is unique in ``found``: each row once
    kinds = dict(found.dtypes)
    added = [F.col(out).cast("double").alias(out) if kinds[out] in INTEGER_TYPES else F.col(out) for out in outputs]
    return joined.select(*(F.col(c) for c in rows.columns), *added)


INTEGER_TYPES = frozenset({"tinyint", "smallint", "int", "bigint"})


def _latest(rows: Any, values: Any, spec: FeatureLookup) -> Any:
    """Per distinct non-null ``(key, timestamp)`` of ``rows``, the output columns of the feature row
    with that key and the latest feature timestamp at or before it (pairs with none are absent)."""
    from pyspark.sql import functions as F

    keys, ts, fts = list(spec.lookup_key), str(spec.timestamp_lookup_key), str(spec.feature_timestamp_key)
    _check_times(rows, values, spec)
    pairs = rows.select(*keys, ts).dropna().distinct()
    condition = [F.col(k) == F.col(_F + k) for k in keys] + [F.col(_F + fts) <= F.col(ts)]
    latest = F.max_by(F.struct(*(F.col(_F + name).alias(f"{_V}{i}") for i, name in enumerate(spec.feature_names))),
                      F.col(_F + fts))
    best = pairs.join(values, on=condition, how="inner").groupBy(*keys, ts).agg(latest.alias(_V))
    return best.select(*keys, ts, *(F.col(f"{_V}.{_V}{i}").alias(out) for i, out in enumerate(spec.output_columns)))


def _check_times(rows: Any, values: Any, spec: FeatureLookup) -> None:
    """Refuse timestamp columns of which exactly one is a number or either is neither a number nor a
    time (``time_type_error``), or of which one carries a time zone (``timestamp``) and the other
    does not (``timestamp_ntz``; ``time_zone_error``), as the pandas join does
    (:func:`lakescore.lookup.same_time_type`). A ``date`` goes with either: Spark compares it as
    midnight of that day, in the session time zone against a ``timestamp`` (UTC: the local session
    pins it, and it is Databricks' default) and as the wall clock against a ``timestamp_ntz``."""
    row_type = dict(rows.dtypes)[str(spec.timestamp_lookup_key)]
    table_type = dict(values.dtypes)[_F + str(spec.feature_timestamp_key)]
    row_kind = _time_kind(row_type)
    kinds = {row_kind, _time_kind(table_type)}
    if "other" in kinds or ("number" in kinds and len(kinds) > 1):
        raise time_type_error(spec, row_type, table_type)
    if kinds == {"aware", "naive"}:
        raise time_zone_error(spec, row_type, table_type, rows_aware=row_kind == "aware")


def _time_kind(spark_type: str) -> str:
    """The kind of a Spark type as :func:`lakescore.lookup.time_kind` names a pandas column's."""
    if spark_type == "timestamp":  # an instant (Spark's TIMESTAMP_LTZ)
        return "aware"
    if spark_type == "timestamp_ntz":
        return "naive"
    if spark_type == "date":
        return "date"
    if spark_type in INTEGER_TYPES | {"float", "double"} or spark_type.startswith("decimal"):
        return "number"
    return "other"


def _refuse_duplicates(table: Any, spec: FeatureLookup) -> None:
    """One aggregate over the feature table: how many rows share a key (and timestamp), and one such key."""
    from pyspark.sql import functions as F

    on = spec.table_key
    shared = table.groupBy(*on).agg(F.count(F.lit(1)).alias("n")).where(F.col("n") > 1)
    found = shared.agg(F.sum("n").alias("rows"), F.min(F.struct(*on)).alias("example")).first()
    if found is not None and found["rows"]:
        raise duplicate_key_error(spec, int(found["rows"]), found["example"].asDict())


def spark_join_all(rows: Any, tables: dict[str, Any], specs: tuple[FeatureLookup, ...] | list[FeatureLookup]) -> Any:
    """``rows`` with every lookup in ``specs`` joined in order (:func:`spark_join_features`).

    Parameters
    ----------
    rows : pyspark.sql.DataFrame
    tables : dict of str to pyspark.sql.DataFrame
        Feature table name -> its rows (read at one version).
    specs : sequence of FeatureLookup
    """
    for spec in specs:
        rows = spark_join_features(rows, tables[spec.table_name], spec)
    return rows
