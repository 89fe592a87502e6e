"""Labels that arrive after a run was monitored.

Each quality row records the label table's Delta version it read (``label_table_version``) and a
digest of the labels it saw for its rows (``labels_digest``). When the label table has moved on,
``lakescore monitor`` reads the labels again at the new version; a run whose labels differ from
the digest gets a new quality row (``measurement = "labels_changed"``) with the performance
recomputed and the other figures carried over from its latest row. The first row stays, so the
quality table keeps every measurement, each with the date it was made (``monitored_at``).
Rows written before these columns existed have no digest, and rows written before digests were
aggregates (no ``v2:`` prefix) have one of another definition: for both, labels count as changed
when the recomputed figures differ from the stored ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakescore.config import MonitoringConfig
from lakescore.frames import derive_label
from lakescore.monitoring.aggregates import LabelHash, label_hash

# Columns a quality table written before label tracking lacks; readers get them as nulls.
TRACKING_COLUMNS = {"label_table_version": "Int64", "labels_digest": "string", "measurement": "string"}
DIGEST_PREFIX = "v2:"  # labels_digest definition: an aggregate of per-row hashes (monitoring.aggregates)
PERFORMANCE_COLUMNS = ("labelled_rows", "labelled_excluded", "accuracy", "roc_auc", "log_loss", "rmse", "mae")


@dataclass(frozen=True)
class LabelSnapshot:
    """The label table read at one version: record keys and the derived ``_label``.

    ``version`` and ``truth`` are None when no label table is configured or it does not exist yet.
    """

    version: int | None
    truth: pd.DataFrame | None

    def for_rows(self, frame: pd.DataFrame, keys: list[str]) -> pd.Series | None:
        """Labels of ``frame``'s rows by position (missing where unknown), joined on ``keys``."""
        if self.truth is None:
            return None
        truth = self.truth.astype({k: frame[k].dtype for k in keys}, errors="ignore")
        return frame[keys].merge(truth, on=keys, how="left")["_label"].reset_index(drop=True)


def label_snapshot(source: pd.DataFrame, version: int, mon: MonitoringConfig, keys: list[str]) -> LabelSnapshot:
    """The label table as read at ``version`` (one read per ``lakescore monitor``), with its label derived.

    Parameters
    ----------
    source : DataFrame
        The label table at ``version``: the record keys and the columns the label reads.
    version : int
        The label table's version read.
    mon : MonitoringConfig
        ``label_column`` and ``label_expression``.
    keys : list of str
        The record keys the labels are joined on.

    Returns
    -------
    LabelSnapshot
        The version read and the keys with their label.
    """
    label = derive_label(source, column=mon.label_column, expression=mon.label_expression)  # type: ignore[arg-type]  # derive_label reads label_expression when label_column is None
    return LabelSnapshot(version, source[keys].reset_index(drop=True).assign(_label=label.array))


def digest(hashed: LabelHash | None) -> str | None:
    """The ``labels_digest`` of a :class:`~lakescore.monitoring.aggregates.LabelHash` (any engine).

    ``v2:`` then SHA-256 of ``"<rows>:<sum>"``. The prefix names the definition: digests written
    by lakescore before it (64 hex digits, no prefix: a SHA-256 of the sorted pairs, which needs
    every row on the driver) are not comparable and are read as no digest (:func:`labels_changed`).
    None when there are no labels at all (no label table).
    """
    if hashed is None:
        return None
    return DIGEST_PREFIX + hashlib.sha256(f"{hashed.rows}:{hashed.total}".encode()).hexdigest()


def labels_digest(frame: pd.DataFrame, keys: list[str], labels: pd.Series | None) -> str | None:
    """:func:`digest` of the (record keys, label) pairs of ``frame``'s rows, computed with pandas.

    Row order does not matter; a missing label hashes as missing, so a label arriving changes the
    digest. The Spark engine gives the same digest for the same rows and labels.
    """
    return digest(label_hash(frame, keys, labels))


def _same(a: Any, b: Any) -> bool:
    if pd.isna(a) or pd.isna(b):
        return bool(pd.isna(a) and pd.isna(b))
    return bool(a == b)


def labels_changed(previous: dict[str, Any], digest: str | None, figures: dict[str, Any]) -> bool:
    """Whether a run's labels differ from those its latest quality row was measured on.

    Parameters
    ----------
    previous : dict
        The run's latest quality row (``labels_digest`` may be missing or null: written by an
        older lakescore).
    digest : str or None
        :func:`digest` of the labels now.
    figures : dict
        :func:`~lakescore.monitoring.performance.performance` on the labels now; compared with
        ``previous`` only when it has no digest of the current definition (none, or one written
        before ``v2:``): then labels count as changed when a figure differs, so an old digest
        never makes a run "labels_changed" on its own.
    """
    before = previous.get("labels_digest")
    if isinstance(before, str) and before.startswith(DIGEST_PREFIX):
        return before != digest
    return any(not _same(previous.get(k, float("nan")), v) for k, v in figures.items())


def latest_measurements(quality: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, model version): its latest measurement (by ``monitored_at``).

    Parameters
    ----------
    quality : DataFrame
        The quality table as read, from this or an older lakescore (missing tracking columns are
        added as nulls).

    Returns
    -------
    DataFrame
        In the order of ``quality``'s first row of each (run_id, model_version).
    """
    quality = with_tracking_columns(quality)
    if quality.empty:
        return quality
    order = quality.reset_index(drop=True).reset_index(names="_order")
    first = order.groupby(["run_id", "model_version"])["_order"].transform("min")
    latest = order.assign(_first=first).sort_values(["monitored_at", "_order"]) \
        .groupby(["run_id", "model_version"], sort=False).tail(1)
    return latest.sort_values("_first").drop(columns=["_order", "_first"]).reset_index(drop=True)


def with_tracking_columns(quality: pd.DataFrame) -> pd.DataFrame:
    """``quality`` with the label tracking columns (nulls where an older lakescore wrote it)."""
    missing = {c: t for c, t in TRACKING_COLUMNS.items() if c not in quality.columns}
    return quality.assign(**{c: pd.Series(pd.NA, index=quality.index, dtype=t) for c, t in missing.items()})
