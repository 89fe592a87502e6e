"""A feature table indexed once for one lookup, so that joining a few rows costs a hash look-up per
row (and a binary search, point in time), not a pass over the whole table.

:func:`lakescore.lookup.join_features` prepares the feature table on every call: it drops the rows
with a null key, checks the keys are unique, casts the keys to the rows' dtypes, converts the
timestamp column and merges (``merge_asof`` point in time). For a batch that is one pass among many;
for a served one-row request it is the whole cost (a warm endpoint holds one table version for its
life). :class:`LookupIndex` does that preparation once per feature table version and keeps, per
lookup key: the distinct values of each key column (a pandas ``Index``: a hash table) and, point in
time, the feature rows of each key sorted by time. Joining rows then costs, per row and key column,
one ``Index.get_indexer`` look-up, and point in time one ``numpy.searchsorted`` in that key's times.

The answer is :func:`lakescore.lookup.join_features`'s, value for value and dtype for dtype: the same
joinable rows (:func:`lakescore.lookup.joinable_rows`), the same key casts
(:func:`lakescore.lookup.keys_like`, one prepared cast per dtype of the rows' keys), the same time
rule (:func:`lakescore.lookup.time_plan`, :func:`lakescore.lookup.as_times`) and the same output
(:func:`lakescore.lookup.with_features`). Whatever the index does not prepare (a refused table, a key
dtype outside :data:`INDEXED_KEY_KINDS`, keys or times that a cast makes equal, a row time that
converts to null), it hands to :func:`join_features` itself, which then answers or refuses as it
always does.

Pandas and numpy only, like :mod:`lakescore.lookup`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from lakescore.errors import FeatureLookupError
from lakescore.lookup import (
    FeatureLookup,
    TimePlan,
    as_times,
    check_columns,
    join_features,
    joinable_rows,
    keys_like,
    looked_up,
    time_kind,
    time_plan,
    with_features,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

INDEXED_KEY_KINDS = frozenset("biufOTMmS")
"""numpy dtype kinds of the rows' key columns the index prepares (bool, integers, floats, objects,
text, datetimes, timedeltas), pandas nullable and text dtypes by their ``kind`` too; any other dtype
(categories, periods, intervals) is joined by :func:`lakescore.lookup.join_features`."""

_MAX_CODE = 2**62  # combined key codes stay well inside int64
_FEW_ROWS = 64  # up to this many rows, text keys are looked up in a dict (no Index built per request)


@dataclass(frozen=True)
class _Keys:
    """The feature table's keys cast to one dtype of the rows' keys: per key column its distinct
    values (``levels``), and per joinable feature row its combined key code (``codes``)."""

    levels: tuple[pd.Index, ...]
    sizes: tuple[int, ...]
    codes: np.ndarray
    unique: pd.Index | None  # exact lookups: the codes as an Index (code -> table position)
    texts: tuple[dict[str, int] | None, ...] = ()  # per object level of texts only: text -> code

    def encode(self, rows: pd.DataFrame, keys: list[str]) -> np.ndarray:
        """Per row, its combined key code, or -1 when a key value (a null included) is in no feature row."""
        combined = np.zeros(len(rows), dtype="int64")
        missing = np.zeros(len(rows), dtype=bool)
        for i, (level, size, key) in enumerate(zip(self.levels, self.sizes, keys)):
            code = self._texts(i, rows[key]) if i < len(self.texts) and self.texts[i] is not None else None
            if code is None:
                code = level.get_indexer(rows[key])
            missing |= code < 0
            combined = combined * size + code
        combined[missing] = -1
        return combined

    def _texts(self, i: int, column: pd.Series) -> np.ndarray | None:
        """A few rows of text keys coded from a dict (what ``get_indexer`` on an object Index gives:
        text equals text only); None for more rows, or a value that is not text."""
        values = column.to_numpy()
        if len(values) > _FEW_ROWS or values.dtype != object or any(type(v) is not str for v in values):
            return None
        texts = self.texts[i]
        assert texts is not None  # noqa: S101 - checked by the caller
        return np.array([texts.get(v, -1) for v in values], dtype="int64")


@dataclass(frozen=True)
class _Times:
    """Point in time, for one :data:`lakescore.lookup.TimePlan`: the feature rows ordered by key code
    then time (``order``: table positions), their times as numbers (``times``), the distinct key
    codes (``groups``, sorted) and where each one's rows start and end in that order."""

    order: np.ndarray
    times: np.ndarray
    groups: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def positions(self, codes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Per row (key code, time as a number): the table position of the latest feature row with
        that code at or before that time, or -1."""
        out = np.full(len(codes), -1, dtype="int64")
        if not len(self.groups):
            return out
        group = np.minimum(np.searchsorted(self.groups, codes), len(self.groups) - 1)  # groups: sorted, unique
        group[self.groups[group] != codes] = -1  # -1: no feature row has the key
        for g in np.unique(group[group >= 0]):
            rows = np.flatnonzero(group == g)
            lo, hi = self.starts[g], self.ends[g]
            at = np.searchsorted(self.times[lo:hi], times[rows], side="right") - 1  # the last time <= the row's
            hit = at >= 0
            out[rows[hit]] = self.order[lo + at[hit]]
        return out


@dataclass
class LookupIndex:
    """One lookup's feature table, prepared once for joins of a few rows (see the module).

    Parameters
    ----------
    features : DataFrame of shape (n_feature_rows, >= len(spec.table_columns))
        The feature table, read at one version; never changed afterwards (the index keeps its rows).
    spec : FeatureLookup

    Notes
    -----
    Building never raises: a table that :func:`lakescore.lookup.join_features` refuses (a missing
    column, duplicate keys) is kept as it is, and every :meth:`join` goes to ``join_features``,
    which refuses it with the same error. The key cast and time order for rows typed like the
    table's own keys and time are prepared when the index is built; those for rows of other dtypes
    on first use (:meth:`prepare` prepares them ahead for given rows); all are kept.
    """

    features: pd.DataFrame
    spec: FeatureLookup
    table: pd.DataFrame | None = field(init=False, default=None)
    values: pd.DataFrame | None = field(init=False, default=None)
    right_kind: Any = field(init=False, default=None)
    matrix: np.ndarray | None = field(init=False, default=None, repr=False)  # values when all are float64
    _keys: dict[tuple[str, ...], _Keys | None] = field(init=False, default_factory=dict, repr=False)
    _times: dict[tuple[tuple[str, ...], TimePlan], _Times | None] = field(init=False, default_factory=dict,
                                                                          repr=False)

    def __post_init__(self) -> None:
        spec = self.spec
        if spec.point_in_time and {spec.timestamp_lookup_key, spec.feature_timestamp_key} & set(spec.lookup_key):
            return  # a time that is also a key: its cast is the key's; join_features answers
        try:
            check_columns(spec, spec.row_columns, self.features.columns)
            table = joinable_rows(self.features, spec)
            right_kind = time_kind(table[str(spec.feature_timestamp_key)]) if spec.point_in_time else None
        except (FeatureLookupError, TypeError, ValueError):
            return  # join_features refuses this table on every join, with its own message
        values = table[list(spec.feature_names)]
        # with_features turns integer features into float64 after taking the rows; doing it once here
        # gives the same values (the cast of each value does not depend on which rows are taken)
        self.values = values.astype({c: "float64" for c in values.columns
                                     if pd.api.types.is_integer_dtype(values[c].dtype)})
        if all(dtype == "float64" for dtype in self.values.dtypes):  # the usual case: one take of one array
            self.matrix = self.values.to_numpy(dtype="float64")
        self.table, self.right_kind = table, right_kind
        # rows typed like the table's own keys and time (the usual request): prepared here, where the
        # index is built (a feature holder, before it forks the replicas that share it)
        own = {k: table[k].iloc[:0] for k in spec.lookup_key}
        if spec.point_in_time:
            own[str(spec.timestamp_lookup_key)] = table[str(spec.feature_timestamp_key)].iloc[:0]
        self.prepare(pd.DataFrame(own))

    def join(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with the lookup's feature columns joined: :func:`lakescore.lookup.join_features`
        ``(frame, features, spec)``, computed from the index.

        Parameters
        ----------
        frame : DataFrame of shape (n_rows, n_columns)
            The rows; must carry ``spec.row_columns`` and none of ``spec.output_columns``.

        Returns
        -------
        DataFrame of shape (n_rows, n_columns + len(spec.feature_names))
            Equal to ``join_features(frame, features, spec)`` (values, dtypes, index, column order).

        Raises
        ------
        FeatureLookupError
            As :func:`lakescore.lookup.join_features`.
        """
        positions = self._located(frame)
        if positions is None or self.values is None:
            return join_features(frame, self.features, self.spec)
        return with_features(frame, self.values, positions, self.spec)

    def outputs(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Only the output columns of :meth:`join` (``join(frame)`` is ``frame`` then these):
        DataFrame of shape (n_rows, len(spec.feature_names)), indexed like ``frame``.

        Raises
        ------
        FeatureLookupError
            As :func:`lakescore.lookup.join_features`.
        """
        positions = self._located(frame)
        if positions is None or self.values is None:
            return join_features(frame, self.features, self.spec).iloc[:, frame.shape[1]:]
        if self.matrix is None:
            return looked_up(self.values, positions, self.spec, frame.index)
        if len(self.matrix):
            taken = self.matrix[positions]  # float64 rows: looked_up's reindex, NaN where no row was found
            taken[positions < 0] = np.nan
        else:
            taken = np.full((len(positions), self.matrix.shape[1]), np.nan)
        return pd.DataFrame(taken, index=frame.index, columns=list(self.spec.output_columns))

    def covers(self, frame: pd.DataFrame) -> bool:
        """Whether :meth:`join` answers ``frame``'s rows from the index (False: it hands them to
        :func:`lakescore.lookup.join_features`, which answers or refuses them). Never raises."""
        try:
            return self.values is not None and self._located(frame) is not None
        except (FeatureLookupError, TypeError, ValueError):
            return False

    def prepare(self, frame: pd.DataFrame) -> None:
        """Prepare the key cast (and time order) that rows of ``frame``'s dtypes use, so the first
        :meth:`join` of such rows finds them ready. ``frame`` may be empty; nothing is raised."""
        try:
            self.join(frame)
        except (FeatureLookupError, TypeError, ValueError):
            pass

    def _located(self, frame: pd.DataFrame) -> np.ndarray | None:
        """:meth:`_positions` of ``frame`` once its columns pass the lookup's check.

        Raises
        ------
        FeatureLookupError
            A missing row column or a clash with the table's (:func:`lakescore.lookup.check_columns`).
        """
        check_columns(self.spec, frame.columns, self.features.columns)
        return self._positions(frame)

    def _positions(self, frame: pd.DataFrame) -> np.ndarray | None:
        """Per row, the table position of its feature row (-1: none); None: join_features answers."""
        spec, keys = self.spec, list(self.spec.lookup_key)
        if self.table is None:
            return None
        dtypes = tuple(str(frame[k].dtype) for k in keys)
        prepared = self._keys[dtypes] if dtypes in self._keys else self._cast_keys(frame, dtypes)
        if prepared is None:
            return None
        try:
            codes = prepared.encode(frame, keys)  # a null key is in no level: -1
            if not spec.point_in_time:
                assert prepared.unique is not None  # noqa: S101 - built for every exact lookup
                return prepared.unique.get_indexer(codes).astype("int64")
            return self._asof_positions(frame, codes, dtypes)
        except TypeError:  # e.g. an unhashable key value: join_features answers (or refuses) it
            return None

    def _cast_keys(self, rows: pd.DataFrame, dtypes: tuple[str, ...]) -> _Keys | None:
        """The table's keys cast to ``rows``' key dtypes (kept); None when the index leaves such rows
        to join_features: a dtype it does not prepare, a cast pandas refuses or that makes keys equal."""
        assert self.table is not None  # noqa: S101 - only called once the table is prepared
        keys = list(self.spec.lookup_key)
        self._keys[dtypes] = None
        if any(rows[k].dtype.kind not in INDEXED_KEY_KINDS for k in keys):
            return None
        try:
            cast = keys_like(rows, self.table[keys], keys)
        except (TypeError, ValueError, OverflowError):
            return None
        levels = tuple(pd.Index(pd.unique(cast[k]), dtype=rows[k].dtype) for k in keys)
        sizes = tuple(len(level) for level in levels)
        if np.prod([max(s, 1) for s in sizes], dtype=float) >= _MAX_CODE:
            return None
        if any(level.hasnans for level in levels):  # a cast made a key null (e.g. the text "nan" as float)
            return None
        codes = _Keys(levels, sizes, np.zeros(0, dtype="int64"), None).encode(cast, keys)
        unique = None
        if not self.spec.point_in_time:
            unique = pd.Index(codes)
            if not unique.is_unique:  # the cast made two keys equal: merge would repeat rows
                return None
        texts = tuple({v: i for i, v in enumerate(level)} if level.dtype == object and
                      all(type(v) is str for v in level) else None for level in levels)
        self._keys[dtypes] = prepared = _Keys(levels, sizes, codes, unique, texts)
        return prepared

    def _asof_positions(self, frame: pd.DataFrame, codes: np.ndarray, dtypes: tuple[str, ...]) -> np.ndarray | None:
        """Point in time: the rule of :func:`lakescore.lookup.join_features` (rows with a null key
        or time find nothing; the latest feature row at or before the row's time)."""
        spec, keys = self.spec, list(self.spec.lookup_key)
        column = frame[str(spec.timestamp_lookup_key)]
        valid = ~pd.isna(column.array)  # Series.notna on the array: no Series built per column
        for key in keys:
            valid &= ~pd.isna(frame[key].array)
        left = column if valid.all() else column[valid]  # join_features reads the times of these rows only
        try:
            right_type = self.features[spec.feature_timestamp_key].dtype
            plan = time_plan(time_kind(left), self.right_kind, spec, left.dtype, right_type)
            times = _numbers(as_times(left, plan))
        except (FeatureLookupError, TypeError, ValueError):
            return None  # join_features refuses these rows with its own message
        if times is None:
            return None
        order = self._order(self._keys[dtypes], dtypes, plan)
        if order is None:
            return None
        positions = np.full(len(frame), -1, dtype="int64")
        positions[valid] = order.positions(codes[valid], times)
        return positions

    def _order(self, prepared: _Keys | None, dtypes: tuple[str, ...], plan: TimePlan) -> _Times | None:
        """The feature rows ordered by key code then time under ``plan`` (kept); None when a time
        does not convert or two feature rows of one key convert to the same time."""
        if (dtypes, plan) in self._times:
            return self._times[(dtypes, plan)]
        assert self.table is not None and prepared is not None  # noqa: S101 - called with prepared keys
        self._times[(dtypes, plan)] = None
        try:
            times = _numbers(as_times(self.table[str(self.spec.feature_timestamp_key)], plan))
        except (TypeError, ValueError):
            return None
        if times is None:
            return None
        order = np.lexsort((times, prepared.codes))  # by code, then time
        codes, times = prepared.codes[order], times[order]
        if ((codes[1:] == codes[:-1]) & (times[1:] == times[:-1])).any():
            return None
        groups = np.unique(codes)
        built = _Times(order, times, groups, np.searchsorted(codes, groups, side="left"),
                       np.searchsorted(codes, groups, side="right"))
        self._times[(dtypes, plan)] = built
        return built


def _numbers(column: pd.Series) -> np.ndarray | None:
    """A converted time column as comparable numbers (float64, or int64 nanoseconds); None when a
    value is null (``merge_asof`` refuses a null time: join_features answers)."""
    if pd.isna(column.array).any():
        return None
    if column.dtype == "float64":
        return column.to_numpy(dtype="float64")
    return column.to_numpy(dtype="datetime64[ns]").view("int64")  # an aware column: its UTC instants


def index_lookups(features: dict[str, pd.DataFrame], specs: Sequence[FeatureLookup]) -> dict[FeatureLookup, LookupIndex]:
    """One :class:`LookupIndex` per lookup in ``specs`` on its table in ``features`` (name -> rows)."""
    return {spec: LookupIndex(features[spec.table_name], spec) for spec in specs}
