"""Serving a feature-lookup model: what a request carries, and the join a replica makes before the chain.

A model trained with ``feature_lookups`` reads columns that no request sends: they are joined on from
the feature tables, exactly as the batch routes join them (:func:`lakescore.lookup.join_all`). So a
request carries the row's own columns: the chain's input columns minus the looked-up ones, plus every
``lookup_key`` and ``timestamp_lookup_key`` (:func:`request_columns`). A request that sends a
looked-up column itself is refused (400 naming the column, like any column the request may not
carry): the endpoint never lets a client's value stand in for the feature table's.

Types of the extra columns: a key or timestamp that is also a chain input keeps its signature type;
any other key is :data:`KEY_KIND` (text or a whole number, null allowed: a null or unknown key finds
no feature row and the recipe's imputers fill the features); any other timestamp is
:data:`TIMESTAMP_KIND`, ISO 8601 text that every row must carry (a point-in-time lookup takes the
latest feature row at or before it). A timestamp without an offset is read as UTC, so every request
time is an instant; against a feature table whose time column has no zone (Delta ``timestamp_ntz``)
it is compared as UTC wall clock, the zone the local Spark session and Databricks use
(:meth:`Features.join`), where the batch join refuses an aware time against a naive one.

The feature tables are read once per replica generation, in the process the replicas are forked from
(:mod:`lakescore.serving.replicas.feature_holder`), so the replicas share their pages; :class:`Features` is
what a replica holds. Nothing here imports pandas at import time: the endpoint process uses
:func:`request_columns` on specs in JSON form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from lakescore.lookup import FeatureLookup
    from lakescore.lookup_index import LookupIndex

KEY_KIND = "key"
TIMESTAMP_KIND = "timestamp"

FeatureReader = Callable[[list[dict[str, Any]], "dict[str, int] | None"], Any]
"""``reader(specs_json, versions) -> FeatureTables``: each lookup's feature table at ``versions``
(table -> Delta version; None: the current ones), read through the runtime
(:func:`lakescore.workflows.serve.read_serving_features`). It must pickle: it runs in children."""


def request_columns(signature: dict[str, str], specs: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The columns a request to a lookup model carries, with their types.

    Parameters
    ----------
    signature : dict of str to str
        The model's input columns -> signature types, in the model's order (the joined columns
        included).
    specs : sequence of dict
        The saved lookup specs (``FeatureLookup.to_json``), in join order; empty: no lookup.

    Returns
    -------
    dict of str to str
        ``signature`` minus every looked-up output column, then each lookup's keys and timestamp
        not already there (once, in lookup order): :data:`KEY_KIND` / :data:`TIMESTAMP_KIND` unless
        the signature types it. Equal to ``signature`` when ``specs`` is empty.
    """
    if not specs:
        return dict(signature)
    joined = {(spec.get("rename_outputs") or {}).get(name, name) for spec in specs for name in spec["feature_names"]}
    columns = {name: kind for name, kind in signature.items() if name not in joined}
    for spec in specs:
        keys = [spec["lookup_key"]] if isinstance(spec["lookup_key"], str) else list(spec["lookup_key"])
        for key in keys:
            columns.setdefault(key, signature.get(key, KEY_KIND))
        if spec.get("timestamp_lookup_key"):
            columns.setdefault(spec["timestamp_lookup_key"], signature.get(spec["timestamp_lookup_key"], TIMESTAMP_KIND))
    return columns


@dataclass(frozen=True)
class Features:
    """The feature tables a replica joins requests against, read once at one version each.

    Attributes
    ----------
    frames : dict of str to DataFrame
        Table name -> its rows (only the columns the lookups read).
    versions : dict of str to int
        Table name -> the Delta version read.
    indexes : dict of FeatureLookup to LookupIndex
        Each lookup's table indexed for joins of a few rows (:class:`lakescore.lookup_index.LookupIndex`),
        built by :meth:`of` for the specs it is given (in the holder, before the replicas are forked,
        so they share it) and otherwise on a lookup's first join.
    """

    frames: dict[str, pd.DataFrame]
    versions: dict[str, int]
    indexes: dict[FeatureLookup, LookupIndex] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, tables: Any, specs: Sequence[FeatureLookup] = ()) -> Features:
        """From a :class:`lakescore.workflows.lookups.FeatureTables` (anything with ``frames`` and
        ``versions``), with the lookups ``specs`` indexed."""
        features = cls(dict(tables.frames), {name: int(v) for name, v in tables.versions.items()})
        for spec in specs:
            features.index(spec)
        return features

    def index(self, spec: FeatureLookup) -> LookupIndex:
        """``spec``'s table indexed for joins (built on first use, then kept)."""
        if spec not in self.indexes:
            from lakescore.lookup_index import LookupIndex  # pandas: only a holder, replica or cold child

            self.indexes[spec] = LookupIndex(self.frames[spec.table_name], spec)
        return self.indexes[spec]

    def prepare(self, frame: pd.DataFrame, specs: Sequence[FeatureLookup]) -> None:
        """Prepare what joining rows of ``frame``'s dtypes needs (key casts, time orders), so a
        replica's first request finds it ready; ``frame`` may be empty. Never raises."""
        from lakescore.errors import LakescoreError

        try:
            self.join(frame, specs)
        except (LakescoreError, KeyError, TypeError, ValueError):
            pass

    def record(self) -> list[dict[str, Any]]:
        """``[{"table": name, "version": n}, ...]`` in lookup order: what the status and records show."""
        return [{"table": name, "version": version} for name, version in self.versions.items()]

    def join(self, frame: pd.DataFrame, specs: Sequence[FeatureLookup]) -> pd.DataFrame:
        """``frame`` (a request's rows) with every lookup joined in order, as
        :func:`lakescore.lookup.join_all` joins them.

        A request time is an instant (``datetime64[ns, UTC]``, :mod:`lakescore.serving.http.wire`); against
        a feature table without a zone (``datetime64`` naive, Delta ``timestamp_ntz``) it is compared
        as UTC wall clock, the zone the local Spark session and Databricks use, so the features equal
        the batch join's for the same naive times. The rows keep their own (aware) time column.

        Parameters
        ----------
        frame : DataFrame of shape (n_rows, n_columns)
            A request's rows (:attr:`lakescore.serving.http.wire.ScoreRequest.frame`).
        specs : sequence of FeatureLookup
            The chain's lookups, in join order.

        Returns
        -------
        DataFrame of shape (n_rows, n_columns + n_looked_up)
            As :func:`lakescore.lookup.join_features`, one lookup after the other, computed from each
            lookup's index (:meth:`index`): a hash look-up per row, not a pass over the table. When
            no lookup reads a column an earlier one adds, the output columns are computed lookup by
            lookup against ``frame`` and added in one step (the same frame, one concatenation).
        """
        import pandas as pd  # a replica only

        from lakescore.lookup import check_columns

        added = [c for spec in specs for c in spec.output_columns]
        if any(c in added for spec in specs for c in spec.row_columns):
            return self._join_in_turn(frame, specs)
        parts, columns = [], list(frame.columns)
        for spec in specs:
            table = self.frames[spec.table_name]
            check_columns(spec, columns, table.columns)  # a clash with an earlier lookup's output too
            parts.append(self.index(spec).outputs(_utc_wall_clock(frame, table, spec)))
            columns += spec.output_columns
        return pd.concat([frame, *parts], axis=1) if parts else frame

    def _join_in_turn(self, frame: pd.DataFrame, specs: Sequence[FeatureLookup]) -> pd.DataFrame:
        """:meth:`join` one lookup after the other (a lookup reads a column an earlier one adds)."""
        for spec in specs:
            table = self.frames[spec.table_name]
            rows = _utc_wall_clock(frame, table, spec)
            joined = self.index(spec).join(rows)
            frame = joined if rows is frame else joined.assign(**{str(spec.timestamp_lookup_key):
                                                                  frame[spec.timestamp_lookup_key]})
        return frame


def _utc_wall_clock(frame: pd.DataFrame, table: pd.DataFrame, spec: FeatureLookup) -> pd.DataFrame:
    """``frame`` with its aware ``timestamp_lookup_key`` as naive UTC when ``table``'s
    ``feature_timestamp_key`` is a naive ``datetime64`` column; else ``frame`` itself."""
    import pandas as pd  # a replica only

    ts, fts = spec.timestamp_lookup_key, spec.feature_timestamp_key
    if not spec.point_in_time or ts not in frame.columns or fts not in table.columns:
        return frame  # no point in time, or join_features refuses the missing column itself
    if isinstance(frame[ts].dtype, pd.DatetimeTZDtype) and pd.api.types.is_datetime64_dtype(table[fts].dtype):
        return frame.assign(**{ts: frame[ts].dt.tz_convert("UTC").dt.tz_localize(None)})  # type: ignore[arg-type]  # ts is one of frame's columns (checked above): a str
    return frame


def read_features(reader: FeatureReader, specs: Sequence[dict[str, Any]],
                  versions: dict[str, int] | None = None) -> Features:
    """``reader(specs, versions)`` as :class:`Features`, each lookup in ``specs`` indexed."""
    from lakescore.lookup import FeatureLookup  # pandas: only a holder or a cold-path child reads

    return Features.of(reader(list(specs), versions), [FeatureLookup.from_json(x) for x in specs])
