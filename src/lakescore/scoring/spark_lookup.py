"""Feature lookups on the Spark route: the join of :mod:`lakescore.lookup`, done in Spark before the UDF.

Same spec, same result as the pandas join (:func:`lakescore.lookup.join_features`): a left join, so
every source row comes out exactly once; a row whose key (or timestamp) is null or finds no feature
row gets nulls; feature rows with a null key (or timestamp) never match; integer feature columns
come out as double (the pandas join gives the chain float64); a feature table with two rows for one
key (and timestamp) is refused. Point in time: per row, the feature row with the same key and the
latest ``feature_timestamp_key`` at or before the row's ``timestamp_lookup_key``, never after.

The point-in-time match is found per distinct ``(key, timestamp)`` pair of the source, not per row,
by a sort-based as-of join (no range join, whose pairs grow as rows x feature rows per key): the
pairs, as "probe" rows without features, and the feature rows are put in one frame, partitioned by
the key and ordered by time with, at equal times, the feature row before the probe (so an exact
match is taken, as ``merge_asof(direction="backward", allow_exact_matches=True)`` does); a running
``last(..., ignorenulls=True)`` carries the latest feature row forward as one struct of its values,
which is null only on probe rows, so a feature VALUE that is null in the latest row stays null (it
never lets an older row's value through). The probe rows are that mapping ``(key, timestamp) ->
features``; the source is left-joined to it on ``(key, timestamp)``, which is unique in it: no row
id and no window over the source rows, and no source row is dropped or repeated. No row reaches the
driver; the duplicate check brings back one aggregate row.
"""

from __future__ import annotations

from typing import Any

from lakescore.lookup import FeatureLookup, check_columns, duplicate_key_error, time_type_error, time_zone_error

_F = "__lakescore_feature__"  # prefix of the feature table's columns inside the join (no clash with the rows')
_V = "__lakescore_value_"  # struct field names of the latest feature row
_K = "__lakescore_key_"  # the key columns inside the as-of union (probes and feature rows)
_T = "__lakescore_time__"  # the time column inside the as-of union
_PROBE = "__lakescore_probe__"  # True on a probe row (a source pair), False on a feature row
_O = "__lakescore_row_"  # a probe's own key and time values, as the rows hold them (null on feature rows)


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
    with that key and the latest feature timestamp at or before it (nulls when there is none).

    Sort-based: probes and feature rows in one frame, a window per key ordered by (time, feature row
    first), the last feature struct carried forward; the keys and timestamp come back in the rows'
    own values: each probe carries them beside the union's columns, which may have widened them
    (``date`` against ``timestamp_ntz``; a ``bigint`` against a ``double`` loses digits above 2**53, so
    a value cast back would no longer equal the row's and its features would be lost)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys, ts, fts = list(spec.lookup_key), str(spec.timestamp_lookup_key), str(spec.feature_timestamp_key)
    _check_times(rows, values, spec)
    at = [f"{_K}{i}" for i in range(len(keys))]
    own = [f"{_O}{i}" for i in range(len(keys) + 1)]  # the probe's keys, then its time
    probes = (rows.select(*keys, ts).dropna().distinct()
              .select(*(F.col(k).alias(a) for k, a in zip(keys, at)), F.col(ts).alias(_T), F.lit(True).alias(_PROBE),
                      *(F.col(c).alias(o) for c, o in zip([*keys, ts], own))))
    found = values.select(*(F.col(_F + k).alias(a) for k, a in zip(keys, at)), F.col(_F + fts).alias(_T),
                          F.lit(False).alias(_PROBE),
                          F.struct(*(F.col(_F + name).alias(f"{_V}{i}") for i, name in enumerate(spec.feature_names)))
                          .alias(_V))
    both = found.unionByName(probes, allowMissingColumns=True)  # a probe's _V: a null struct
    window = (Window.partitionBy(*at).orderBy(F.col(_T).asc(), F.col(_PROBE).asc())  # False first: feature row
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    carried = both.select(*own, _PROBE, F.last(_V, ignorenulls=True).over(window).alias(_V)).where(F.col(_PROBE))
    return carried.select(*(F.col(o).alias(c) for c, o in zip([*keys, ts], own)),
                          *(F.col(f"{_V}.{_V}{i}").alias(out) for i, out in enumerate(spec.output_columns)))


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
