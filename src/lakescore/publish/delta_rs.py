"""The local writer: delta-rs, with the guard checked on the snapshot it commits against.

Each attempt loads the table, reads its app transaction version, decides with
:func:`lakescore.publish.plan.decide`, and commits the append against that same snapshot with the
app transaction and the receipt in the commit. A concurrent commit makes delta-rs raise
``CommitFailedError``; the writer then reloads and decides again, so a racing replay becomes a
no-op instead of a duplicate.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from lakescore.errors import PublishError
from lakescore.publish.plan import RECEIPT_KEY, Decision, PublishRequest, TargetState, decide

MAX_ATTEMPTS = 5


def _state(path: str, app_id: str) -> tuple[Any, TargetState]:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None, TargetState(exists=False)
    table = DeltaTable(path)
    columns = tuple(f.name for f in table.schema().fields)
    return table, TargetState(True, table.version(), table.transaction_version(app_id), columns)


def commit(path: str, data: pa.Table, request: PublishRequest, receipt: dict[str, Any]) -> tuple[Decision, int | None]:
    """Append ``data`` to the Delta table at ``path`` exactly once for ``request``.

    Returns
    -------
    (Decision, int or None)
        The decision taken and the table version after it (unchanged for a no-op).

    Raises
    ------
    PublishError
        Schema mismatch, or still conflicting after 5 attempts.
    """
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    last_error: Exception | None = None
    for _ in range(MAX_ATTEMPTS):
        table, state = _state(path, request.app_id)
        decision = decide(request, state)
        if decision.action == "noop":
            return decision, state.version
        properties = CommitProperties(
            app_transactions=[Transaction(request.app_id, request.source_version)],
            custom_metadata={RECEIPT_KEY: json.dumps(receipt, sort_keys=True)},
        )
        try:
            write_deltalake(table if table is not None else path, data, mode="append",
                            commit_properties=properties)
        except CommitFailedError as err:  # someone committed first: reload and decide again
            last_error = err
            continue
        _, after = _state(path, request.app_id)
        return decision, after.version
    raise PublishError(f"could not commit to {request.prediction_table} after {MAX_ATTEMPTS} attempts "
                       f"({last_error}); re-run the publish, it is safe to repeat")


def receipts(path: str) -> list[dict[str, Any]]:
    """Every lakescore receipt in the table's history, newest first, with the table version."""
    from deltalake import DeltaTable

    out = []
    for entry in DeltaTable(path).history():
        if RECEIPT_KEY in entry:
            out.append({"table_version": entry["version"], **json.loads(entry[RECEIPT_KEY])})
    return out
