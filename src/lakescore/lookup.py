"""Feature lookups: join a feature table's columns onto the rows by key, as training.yml
``feature_lookups`` says (shaped like Databricks Feature Engineering's ``FeatureLookup``).

A lookup is a left join by key: every input row comes out once, in the same order with the same
index; a row whose key (or timestamp) finds no feature row gets nulls, which the recipe's imputers
handle. A point-in-time lookup (``timestamp_lookup_key``) takes, per row, the latest feature row
with the same key whose ``feature_timestamp_key`` is at or before the row's timestamp, never one
after it; both timestamps carry a time zone (compared as UTC instants) or neither does, never one
of each, and both are times or both numbers; a date is midnight of that day in the other side's zone
(UTC against zoned times). The join reads only the row itself and the feature table, so it is row-local: a row's
features never depend on the other rows of its batch.

Pandas only: no Spark, MLflow or Delta here (the workflows read the feature table and hand it over).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
import pandas as pd

from lakescore.errors import FeatureLookupError

_POS = "__lakescore_feature_row__"
_ROW = "__lakescore_input_row__"


@dataclass(frozen=True)
class FeatureLookup:
    """One feature lookup (training.yml ``feature_lookups[i]``).

    Attributes
    ----------
    table_name : str
        Three-part name of the feature table (catalog.schema.table).
    lookup_key : tuple of str
        Columns that the rows and the feature table share and are joined on (same names in both).
    feature_names : tuple of str
        Feature table columns to add.
    rename_outputs : tuple of (str, str)
        ``feature name -> output column`` pairs for the names that are renamed.
    timestamp_lookup_key : str or None
        The rows' timestamp column; set for a point-in-time lookup.
    feature_timestamp_key : str or None
        The feature table's timestamp column (Feature Engineering's timeseries key); defaults to
        ``timestamp_lookup_key`` when that is set.
    """

    table_name: str
    lookup_key: tuple[str, ...]
    feature_names: tuple[str, ...]
    rename_outputs: tuple[tuple[str, str], ...] = field(default=())
    timestamp_lookup_key: str | None = None
    feature_timestamp_key: str | None = None

    def __post_init__(self) -> None:
        if self.timestamp_lookup_key and not self.feature_timestamp_key:
            object.__setattr__(self, "feature_timestamp_key", self.timestamp_lookup_key)

    @property
    def point_in_time(self) -> bool:
        """True when the lookup is point in time (``timestamp_lookup_key`` is set)."""
        return self.timestamp_lookup_key is not None

    @property
    def output_columns(self) -> tuple[str, ...]:
        """The columns the join adds, in ``feature_names`` order, renamed per ``rename_outputs``."""
        renames = dict(self.rename_outputs)
        return tuple(renames.get(name, name) for name in self.feature_names)

    @property
    def row_columns(self) -> tuple[str, ...]:
        """The columns the rows must carry: the keys, and the timestamp for a point-in-time lookup."""
        return (*self.lookup_key, *((self.timestamp_lookup_key,) if self.timestamp_lookup_key else ()))

    @property
    def table_columns(self) -> tuple[str, ...]:
        """The feature table columns the join reads."""
        ts = (self.feature_timestamp_key,) if self.feature_timestamp_key else ()
        return tuple(dict.fromkeys((*self.lookup_key, *ts, *self.feature_names)))

    @property
    def table_key(self) -> list[str]:
        """The feature table columns that identify one feature row: the keys, then (point in time)
        ``feature_timestamp_key``."""
        return [*self.lookup_key, *((self.feature_timestamp_key,) if self.feature_timestamp_key else ())]

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict; :meth:`from_json` gives back an equal spec."""
        return {"table_name": self.table_name, "lookup_key": list(self.lookup_key),
                "feature_names": list(self.feature_names),
                "rename_outputs": {old: new for old, new in self.rename_outputs},
                "timestamp_lookup_key": self.timestamp_lookup_key,
                "feature_timestamp_key": self.feature_timestamp_key}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeatureLookup:
        """The spec saved by :meth:`to_json` (or written in training.yml)."""
        keys = data["lookup_key"]
        return cls(table_name=data["table_name"], lookup_key=tuple([keys] if isinstance(keys, str) else keys),
                   feature_names=tuple(data["feature_names"]),
                   rename_outputs=tuple((data.get("rename_outputs") or {}).items()),
                   timestamp_lookup_key=data.get("timestamp_lookup_key"),
                   feature_timestamp_key=data.get("feature_timestamp_key"))

    def digest_text(self) -> str:
        """The spec as canonical JSON text (sorted keys), for fingerprints and messages."""
        return json.dumps(self.to_json(), sort_keys=True)


def join_features(frame: pd.DataFrame, features: pd.DataFrame, spec: FeatureLookup) -> pd.DataFrame:
    """``frame`` with the feature columns of ``spec`` joined on by key (a left join).

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, n_columns)
        The rows; must carry ``spec.row_columns`` and none of ``spec.output_columns``.
    features : DataFrame of shape (n_feature_rows, >= len(spec.table_columns))
        The feature table (read at one version).
    spec : FeatureLookup

    Returns
    -------
    DataFrame of shape (n_rows, n_columns + len(spec.feature_names))
        ``frame``'s columns, same index and order, then the output columns. A row whose key or
        timestamp is null, or finds no feature row, gets nulls. Integer feature columns come out
        as float64 whether or not a row missed, so training and scoring see the same dtype.
        Point in time: the feature row with the row's key and the latest ``feature_timestamp_key``
        that is <= the row's ``timestamp_lookup_key`` (pandas ``merge_asof``, ``direction="backward"``).
        Feature rows with a null key (or timestamp) never match.

    Raises
    ------
    FeatureLookupError
        ``frame`` lacks a key or timestamp column; ``features`` lacks a column the spec reads;
        an output column already exists in ``frame`` (fix: ``rename_outputs``); ``features`` holds
        two rows for one key (or one key and timestamp, point in time); point in time, one timestamp
        column carries a time zone and the other does not (:func:`same_time_type`).
    """
    check_columns(spec, frame.columns, features.columns)
    table = joinable_rows(features, spec)
    positions = _asof_positions(frame, table, spec) if spec.point_in_time else _exact_positions(frame, table, spec)
    return with_features(frame, table[list(spec.feature_names)], positions, spec)


def joinable_rows(features: pd.DataFrame, spec: FeatureLookup) -> pd.DataFrame:
    """The feature rows a lookup can join: ``spec.table_columns`` of the rows whose key (and
    timestamp, point in time) is not null, renumbered 0..n-1 in table order.

    Parameters
    ----------
    features : DataFrame of shape (n_feature_rows, >= len(spec.table_columns))
        The feature table (read at one version); it must carry ``spec.table_columns``.
    spec : FeatureLookup

    Returns
    -------
    DataFrame of shape (n_joinable, len(spec.table_columns))

    Raises
    ------
    FeatureLookupError
        Two rows share a key (and timestamp, point in time) (:func:`duplicate_key_error`).
    """
    on = spec.table_key
    table = features[list(spec.table_columns)].dropna(subset=on).reset_index(drop=True)
    _refuse_duplicates(table, on, spec)
    return table


def with_features(frame: pd.DataFrame, values: pd.DataFrame, positions: np.ndarray, spec: FeatureLookup
                  ) -> pd.DataFrame:
    """``frame`` with the feature rows at ``positions`` added as the lookup's output columns.

    Parameters
    ----------
    frame : DataFrame of shape (n_rows, n_columns)
        The rows.
    values : DataFrame of shape (n_joinable, len(spec.feature_names))
        The ``feature_names`` columns of :func:`joinable_rows` (integer columns may already be float64).
    positions : ndarray of int64, shape (n_rows,)
        Per row, the position of its feature row in ``values``; -1: none (nulls).
    spec : FeatureLookup

    Returns
    -------
    DataFrame of shape (n_rows, n_columns + len(spec.feature_names))
        ``frame``'s columns, same index and order, then :func:`looked_up`'s.
    """
    return pd.concat([frame, looked_up(values, positions, spec, frame.index)], axis=1)


def looked_up(values: pd.DataFrame, positions: np.ndarray, spec: FeatureLookup, index: pd.Index) -> pd.DataFrame:
    """The lookup's output columns for rows whose feature rows are at ``positions`` in ``values``.

    Parameters
    ----------
    values : DataFrame of shape (n_joinable, len(spec.feature_names))
        As :func:`with_features`.
    positions : ndarray of int64, shape (n_rows,)
        Per row, the position of its feature row in ``values``; -1: none (nulls).
    spec : FeatureLookup
    index : Index of length n_rows
        The rows' index, which the output takes.

    Returns
    -------
    DataFrame of shape (n_rows, len(spec.feature_names))
        The ``feature_names`` columns, renamed per ``rename_outputs``; integer columns as float64.
    """
    renames = dict(spec.rename_outputs)
    added = values.reindex(positions)
    integers = {c: "float64" for c, dtype in added.dtypes.items() if pd.api.types.is_integer_dtype(dtype)}
    if integers:
        added = added.astype(integers)
    added.columns = [renames.get(c, c) for c in added.columns]
    added.index = index
    return added


def check_columns(spec: FeatureLookup, row_columns: Iterable[str], table_columns: Iterable[str]) -> None:
    """Refuse a join that cannot be made, from column names alone (both joins: pandas and Spark).

    Parameters
    ----------
    spec : FeatureLookup
    row_columns : iterable of str
        The rows' columns.
    table_columns : iterable of str
        The feature table's columns.

    Raises
    ------
    FeatureLookupError
        The rows lack a key or timestamp column; the table lacks a column the spec reads; an output
        column already exists in the rows (fix: ``rename_outputs``).
    """
    rows, table = list(row_columns), list(table_columns)
    missing = [c for c in spec.row_columns if c not in rows]
    if missing:
        raise FeatureLookupError(f"feature lookup on {spec.table_name}: the rows lack column(s) {missing} that "
                                 f"lookup_key/timestamp_lookup_key name; add them to the source table or fix the "
                                 "lookup", table=spec.table_name, columns=missing)
    absent = [c for c in spec.table_columns if c not in table]
    if absent:
        raise FeatureLookupError(f"feature table {spec.table_name} has no column(s) {absent}; available: "
                                 f"{', '.join(map(str, table))}; fix lookup_key, feature_names or "
                                 "feature_timestamp_key", table=spec.table_name, columns=absent)
    clash = [c for c in spec.output_columns if c in rows]
    if clash:
        raise FeatureLookupError(f"feature lookup on {spec.table_name}: output column(s) {clash} already exist in "
                                 f"the rows; rename them with rename_outputs, e.g. {{{clash[0]!r}: "
                                 f"'{clash[0]}_{spec.table_name.split('.')[-1]}'}}", table=spec.table_name,
                                 columns=clash)


def duplicate_key_error(spec: FeatureLookup, rows: int, example: dict[str, Any]) -> FeatureLookupError:
    """The refusal of a feature table with ``rows`` rows sharing a key (and timestamp), ``example``
    being one such key (both joins raise it)."""
    on = spec.table_key
    return FeatureLookupError(f"feature table {spec.table_name} has {rows} rows sharing a key "
                              f"{tuple(on)} (e.g. {example}); a lookup needs one feature row per key"
                              f"{' and timestamp' if spec.point_in_time else ''}. Deduplicate the feature "
                              "table or add the column that tells the rows apart to lookup_key",
                              table=spec.table_name, key=on, duplicate=example)


def time_type_error(spec: FeatureLookup, row_type: object, table_type: object) -> FeatureLookupError:
    """The refusal of a point-in-time lookup whose two timestamp columns are not comparable times."""
    return FeatureLookupError(f"feature lookup on {spec.table_name}: timestamp_lookup_key "
                              f"{spec.timestamp_lookup_key!r} ({row_type}) and feature_timestamp_key "
                              f"{spec.feature_timestamp_key!r} ({table_type}) are not comparable times; "
                              "store both as timestamps", table=spec.table_name)


def _refuse_duplicates(table: pd.DataFrame, on: list[str], spec: FeatureLookup) -> None:
    dup = table.duplicated(subset=on, keep=False)
    if dup.any():
        raise duplicate_key_error(spec, int(dup.sum()), {c: table.loc[dup, c].iloc[0] for c in on})


def keys_like(rows: pd.DataFrame, table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``table`` with ``columns`` cast to the dtypes of ``rows`` (a join needs equal key dtypes).

    Raises
    ------
    TypeError, ValueError
        A table value has no value of the rows' dtype (pandas ``astype`` refuses it).
    """
    return table.astype({c: rows[c].dtype for c in columns if table[c].dtype != rows[c].dtype})


def _exact_positions(frame: pd.DataFrame, table: pd.DataFrame, spec: FeatureLookup) -> np.ndarray:
    """Per input row, the position of its feature row in ``table``, or -1."""
    keys = list(spec.lookup_key)
    rows = frame[keys].reset_index(drop=True)
    right = keys_like(rows, table[keys], keys).assign(**{_POS: np.arange(len(table))})
    merged = rows.merge(right, how="left", on=keys, sort=False)  # right keys are unique: one row per row
    return merged[_POS].fillna(-1).to_numpy(dtype="int64")


def _asof_positions(frame: pd.DataFrame, table: pd.DataFrame, spec: FeatureLookup) -> np.ndarray:
    """Per input row, the position in ``table`` of the latest feature row at or before its timestamp, or -1."""
    keys, ts, fts = list(spec.lookup_key), str(spec.timestamp_lookup_key), str(spec.feature_timestamp_key)
    rows = frame[[*keys, ts]].reset_index(drop=True).assign(**{_ROW: np.arange(len(frame))})
    rows = rows.dropna(subset=[*keys, ts])
    right = keys_like(rows, table[[*keys, fts]], keys).assign(**{_POS: np.arange(len(table))})
    left_ts, right_ts = same_time_type(rows[ts], right[fts], spec)
    left = rows.assign(**{ts: left_ts}).sort_values(ts, kind="stable")
    right = right.assign(**{fts: right_ts}).sort_values(fts, kind="stable")
    matched = pd.merge_asof(left, right.rename(columns={fts: f"{_POS}_ts"}), left_on=ts, right_on=f"{_POS}_ts",
                            by=keys, direction="backward", allow_exact_matches=True)
    positions = np.full(len(frame), -1, dtype="int64")
    found = matched[_POS].notna().to_numpy()
    positions[matched[_ROW].to_numpy()[found]] = matched[_POS].to_numpy()[found].astype("int64")
    return positions


def same_time_type(left: pd.Series, right: pd.Series, spec: FeatureLookup) -> tuple[pd.Series, pd.Series]:
    """Both timestamp columns of a point-in-time lookup as one comparable type.

    Parameters
    ----------
    left : Series
        The rows' ``timestamp_lookup_key`` column (datetimes, dates, ISO 8601 text or numbers).
    right : Series
        The feature table's ``feature_timestamp_key`` column.
    spec : FeatureLookup
        Named in the refusals.

    Returns
    -------
    tuple of Series
        Both as float64 when both are numbers; both as ``datetime64[ns, UTC]`` when either carries a
        time zone (or UTC offset) and the other does too or is a date; both as ``datetime64[ns]``
        otherwise (naive against naive compares wall clocks). A date (``datetime.date`` values, as a
        Delta ``date`` column reads) is midnight of that day in the other side's zone: UTC against
        zoned times, the wall clock against naive ones; the Spark join compares it the same way.

    Raises
    ------
    FeatureLookupError
        Exactly one column holds numbers, or a column is not readable as times (``time_type_error``,
        as the Spark join); a column mixes times with and without a zone (or UTC offset); or one
        column carries a time zone and the other is a naive time: a naive time has no instant to
        compare, so the join refuses rather than guess its zone (``time_zone_error``).
    """
    try:
        left_kind, right_kind = time_kind(left), time_kind(right)
    except (TypeError, ValueError) as err:
        raise time_type_error(spec, left.dtype, right.dtype) from err
    plan = time_plan(left_kind, right_kind, spec, left.dtype, right.dtype)
    if plan == "number":
        return as_times(left, plan), as_times(right, plan)
    try:
        return as_times(left, plan), as_times(right, plan)
    except (TypeError, ValueError) as err:
        raise time_type_error(spec, left.dtype, right.dtype) from err


TimeKind = Literal["number", "aware", "naive", "date", "mixed"]
TimePlan = Literal["number", "aware", "naive"]


def time_plan(left_kind: TimeKind | None, right_kind: TimeKind | None, spec: FeatureLookup,
              left_type: object, right_type: object) -> TimePlan:
    """The one type both timestamp columns of a point-in-time lookup are compared as, from their
    :func:`time_kind` (the rule of :func:`same_time_type`).

    Parameters
    ----------
    left_kind, right_kind : str or None
        :func:`time_kind` of the rows' and of the feature table's column.
    spec : FeatureLookup
        Named in the refusals.
    left_type, right_type : object
        The two columns' dtypes, named in the refusals.

    Returns
    -------
    str
        ``"number"`` (both float64), ``"aware"`` (both ``datetime64[ns, UTC]``) or ``"naive"``
        (both ``datetime64[ns]``).

    Raises
    ------
    FeatureLookupError
        As :func:`same_time_type`: mixed zones in one column, a number against a time, an aware
        time against a naive one.
    """
    if "mixed" in (left_kind, right_kind):
        raise _mixed_zones_error(spec, rows=left_kind == "mixed")
    kinds = {left_kind, right_kind} - {None}
    if kinds == {"number"}:
        return "number"
    if "number" in kinds:
        raise time_type_error(spec, left_type, right_type)
    if kinds == {"aware", "naive"}:
        raise time_zone_error(spec, left_type, right_type, rows_aware=left_kind == "aware")
    return "aware" if "aware" in kinds else "naive"


def as_times(column: pd.Series, plan: TimePlan) -> pd.Series:
    """``column`` as the type :func:`time_plan` chose: float64, ``datetime64[ns, UTC]`` or
    ``datetime64[ns]``.

    Raises
    ------
    TypeError, ValueError
        A value is not readable as that type (pandas refuses it).
    """
    aware = plan == "aware"
    unit = "float64" if plan == "number" else "datetime64[ns, UTC]" if aware else "datetime64[ns]"
    if column.dtype == unit:
        return column  # already that type: the conversion would give the same values
    if plan == "number":
        return column.astype("float64")
    return pd.to_datetime(column, utc=aware).astype(unit)

# the end of ISO 8601 text that carries a zone: Z, UTC/GMT, +hh:mm, +hhmm, or +hh after a time
_ZONE_SUFFIX = r"(?:Z|UTC|GMT|[+-]\d\d:?\d\d|[T ]\d\d(?::?\d\d){0,2}(?:[.,]\d+)?[+-]\d\d)\s*$"


def time_kind(column: pd.Series) -> TimeKind | None:
    """What a point-in-time lookup's timestamp column holds, as the Spark join's types tell it.

    Parameters
    ----------
    column : Series
        A ``timestamp_lookup_key`` or ``feature_timestamp_key`` column.

    Returns
    -------
    str or None
        ``"number"`` (numeric dtype, or objects that are all numbers); ``"aware"`` (a time-zone aware
        dtype, or objects / ISO 8601 text that all carry a zone or UTC offset, Spark's ``timestamp``);
        ``"naive"`` (``datetime64`` without a zone, or objects / text without one, Spark's
        ``timestamp_ntz``); ``"date"`` (``datetime.date`` values, Spark's ``date``); ``"mixed"``
        (some values carry a zone and some do not); None when the column holds no value to tell.
        Text is matched against one regular expression in Arrow (RE2, whole column at once), not
        parsed value by value; it gives ``pd.Timestamp``'s answer for ISO 8601 text.

    Raises
    ------
    TypeError, ValueError
        An object that is not readable as a time (``pd.Timestamp`` refuses it).
    """
    if isinstance(column.dtype, pd.DatetimeTZDtype):
        return "aware"
    if pd.api.types.is_datetime64_dtype(column.dtype):
        return "naive"
    if pd.api.types.is_numeric_dtype(column.dtype):
        return "number"
    inferred = pd.api.types.infer_dtype(column, skipna=True)
    if inferred == "empty":
        return None
    if inferred in {"integer", "floating", "mixed-integer-float", "decimal"}:
        return "number"
    if inferred == "date" and not any(isinstance(value, datetime) for value in column.dropna()):
        return "date"  # a datetime is a date too: infer_dtype says "date" for dates mixed with datetimes
    if inferred == "string":
        zoned, total = _zoned_text(column)
    else:  # datetimes and mixed objects: few and small, value by value
        flags = [pd.Timestamp(value).tzinfo is not None for value in column.dropna()]
        zoned, total = sum(flags), len(flags)
    if not total:
        return None
    if zoned == total:
        return "aware"
    return "mixed" if zoned else "naive"


def _zoned_text(column: pd.Series) -> tuple[int, int]:
    """How many of the non-null texts in ``column`` end in a zone (:data:`_ZONE_SUFFIX`), of how many."""
    import pyarrow as pa  # only for text times: RE2 over the whole column at once
    import pyarrow.compute as pc

    text = pa.array(column, type=pa.string(), from_pandas=True)
    zoned = pc.match_substring_regex(text, _ZONE_SUFFIX, ignore_case=True)
    return int(pc.sum(zoned).as_py() or 0), len(text) - text.null_count


def _mixed_zones_error(spec: FeatureLookup, *, rows: bool) -> FeatureLookupError:
    column = (f"the rows' {spec.timestamp_lookup_key!r}" if rows else
              f"feature table column {spec.feature_timestamp_key!r}")
    return FeatureLookupError(f"feature lookup on {spec.table_name}: {column} mixes times that carry a time zone (or "
                              "UTC offset) with times that do not, so they are not one comparable column; give "
                              "every time an offset (e.g. '2013-01-01T05:00:00Z') or none",
                              table=spec.table_name, columns=[spec.timestamp_lookup_key, spec.feature_timestamp_key])


def time_zone_error(spec: FeatureLookup, row_type: object, table_type: object, *, rows_aware: bool
                    ) -> FeatureLookupError:
    """The refusal of a point-in-time lookup whose one timestamp column carries a time zone (or UTC
    offset) and whose other does not (both joins raise it)."""
    aware, naive = ((f"the rows' {spec.timestamp_lookup_key!r}", f"feature table column {spec.feature_timestamp_key!r}")
                    if rows_aware else
                    (f"feature table column {spec.feature_timestamp_key!r}", f"the rows' {spec.timestamp_lookup_key!r}"))
    return FeatureLookupError(f"feature lookup on {spec.table_name}: {aware} carries a time zone and {naive} does "
                              f"not (timestamp_lookup_key {row_type}, feature_timestamp_key {table_type}), so "
                              "their instants cannot be compared; store both as UTC timestamps (Delta "
                              "'timestamp', pandas datetime64[ns, UTC]), or both without a zone",
                              table=spec.table_name,
                              columns=[spec.timestamp_lookup_key, spec.feature_timestamp_key])


def join_all(frame: pd.DataFrame, tables: dict[str, pd.DataFrame], specs: tuple[FeatureLookup, ...] | list[FeatureLookup]
             ) -> pd.DataFrame:
    """``frame`` with every lookup in ``specs`` joined in order (:func:`join_features`).

    Parameters
    ----------
    tables : dict of str to DataFrame
        Feature table name -> its rows (read at one version).
    """
    for spec in specs:
        frame = join_features(frame, tables[spec.table_name], spec)
    return frame


def lookup_inputs(specs: tuple[FeatureLookup, ...] | list[FeatureLookup], input_columns: tuple[str, ...] | list[str]
                  ) -> list[str]:
    """The columns a source must carry for a chain whose ``input_columns`` include lookup outputs:
    its inputs minus the joined columns, plus the lookups' keys and timestamps (in order, once)."""
    joined = {c for spec in specs for c in spec.output_columns}
    keys = [c for spec in specs for c in spec.row_columns]
    return list(dict.fromkeys([*(c for c in input_columns if c not in joined), *keys]))
