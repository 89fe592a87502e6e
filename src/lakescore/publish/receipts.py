"""Receipts: what each lakescore commit records, and the receipts table that keeps them beyond
the log (see :mod:`lakescore.publish.plan` for why both exist). Pure functions over dicts."""

from __future__ import annotations

import json
from typing import Any

RECEIPT_MARKER = "lakescore_receipt"  # key (format number) inside the commit's userMetadata JSON
RECEIPT_FORMAT = 1
RECEIPTS_SUFFIX = "_lakescore_receipts"  # the receipts table: <prediction_table>_lakescore_receipts


def receipts_table_for(prediction_table: str) -> str:
    """The table that keeps every receipt of ``prediction_table`` beyond its log: the same name
    with ``_lakescore_receipts`` appended (``main.f.preds`` -> ``main.f.preds_lakescore_receipts``)."""
    return prediction_table + RECEIPTS_SUFFIX


def parse_receipt(user_metadata: Any) -> dict[str, Any] | None:
    """The receipt in a commit's ``userMetadata`` (a JSON text with ``lakescore_receipt``), or None."""
    if not isinstance(user_metadata, str) or RECEIPT_MARKER not in user_metadata:
        return None
    try:
        body = json.loads(user_metadata)
    except ValueError:
        return None
    return body if isinstance(body, dict) and body.get(RECEIPT_MARKER) == RECEIPT_FORMAT else None


def _created_the_table(receipt: dict[str, Any]) -> bool:
    """Whether a receipt read from a table's log is that of the commit that created the table with
    its rows: version 0, planned against no version, naming no table id (the table had none yet).
    It names the table whose log holds it."""
    return (receipt.get("target_table_id") is None and int(receipt["table_version"]) == 0
            and receipt.get("target_read_version") is None)


def merge_receipts(logged: list[dict[str, Any]], stored: list[dict[str, Any]],
                   table_id: str | None) -> list[dict[str, Any]]:
    """One list of receipts from the table's log and its receipts table, newest first.

    Parameters
    ----------
    logged : list of dict
        Receipts still in the commit history (each with ``table_version``). The receipt of the
        commit that created the table (version 0, read against no version, with no
        ``target_table_id``: the table had no id before that commit) gets ``table_id``.
    stored : list of dict
        Rows of the receipts table, as receipts (may repeat one another or ``logged``).
    table_id : str or None
        The prediction table's id now.

    Returns
    -------
    list of dict
        One receipt per ``(target_table_id, table_version)``: the logged copy wins, with the fields
        only the stored copy has added (the counts of a one-pass run, observed after its commit
        was written). Receipts of
        the table as it is now come first, by ``table_version`` descending; then receipts of
        earlier tables of that name (dropped and recreated), by ``committed_at`` descending.
    """
    logged = [{**r, "target_table_id": table_id} if _created_the_table(r) else r for r in logged]
    merged: dict[tuple[Any, int], dict[str, Any]] = {}
    for receipt in [*stored, *logged]:
        key = (receipt.get("target_table_id"), int(receipt["table_version"]))
        merged[key] = {**merged.get(key, {}), **receipt}
    current = sorted((r for r in merged.values() if r.get("target_table_id") == table_id),
                     key=lambda r: -int(r["table_version"]))
    earlier = sorted((r for r in merged.values() if r.get("target_table_id") != table_id),
                     key=lambda r: (str(r.get("committed_at", "")), int(r["table_version"])), reverse=True)
    return [*current, *earlier]


def receipt_rows(found: list[dict[str, Any]], held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows to append to the receipts table: one per receipt of ``found`` that ``held`` (the
    table's rows, as receipts) lacks, keyed on ``(target_table_id, table_version)``.

    Returns
    -------
    list of dict
        ``target_table_id``, ``table_version``, ``run_id``, ``committed_at`` and ``receipt`` (the
        whole receipt as JSON text, so it round-trips exactly), in the order of ``found``.
    """
    def key(r: dict[str, Any]) -> tuple[Any, int]:
        return r.get("target_table_id"), int(r["table_version"])

    have = {key(r) for r in held}
    rows: dict[tuple[Any, int], dict[str, Any]] = {}
    for r in found:
        if key(r) not in have:
            rows.setdefault(key(r), {"target_table_id": r.get("target_table_id"), "table_version": int(r["table_version"]),
                                     "run_id": r.get("run_id"), "committed_at": r.get("committed_at"),
                                     "receipt": json.dumps(r, sort_keys=True)})
    return list(rows.values())
