"""Every answered row, recorded like a batch prediction and appended to the inference table in
batches (never one Delta commit per request).

A record holds the request id, when it arrived, the row's input (JSON text), the answer
(``prediction`` as text, ``probability``, ``scoring_status``, ``exclusion_reason``), the version that
answered, the path (``warm`` | ``cold``), the request latency, the row's drift check and, for a model
with feature lookups, ``feature_tables``: the feature tables and Delta versions the row was joined
with (JSON text ``[{"table": ..., "version": n}]``; null for a model without lookups), and
``outputs``: the answer's other columns as JSON text (sorted keys), null when it has none — a model
set's whole answer (``<component>_prediction``, ``<component>_probability``, composed and combined-rule
columns; its ``prediction`` and ``probability`` are null), a chain's output-rule columns. Each request
also adds one ``ml.predict_query`` audit event, written to SQLite with the same flush. When the
buffer passes ``max_buffer_rows`` (a table that cannot be written), the oldest rows are dropped and
counted in the status.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from lakescore.serving.state import AuditEvent, ServingState

if TYPE_CHECKING:  # pandas is imported when a flush builds a frame
    import pandas as pd

COLUMNS = ["request_id", "endpoint", "received_at", "row_index", "model_name", "model_version", "served",
           "latency_ms", "drift_check", "input", "prediction", "probability", "scoring_status", "exclusion_reason",
           "feature_tables", "outputs"]
STANDARD = frozenset(("prediction", "probability", "scoring_status", "exclusion_reason", "model_version", "served",
                      "feature_tables"))
"""The answer keys recorded in columns of their own; every other key goes to ``outputs``."""


@dataclass(frozen=True)
class Answered:
    """One answered request, as the endpoint hands it to the recorder."""

    request_id: str
    received_at: float  # unix seconds
    inputs: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    latency_ms: float


class PredictionRecorder:
    """Buffers answered rows and appends them to the inference table in one commit per flush.

    Parameters
    ----------
    write : callable
        ``write(records)`` appends the records (one dict per answered row, the keys of
        :data:`COLUMNS`) to the inference table, e.g. ``runtime.write_table(name,
        records_frame(records), mode="append")``; the endpoint runs that in a child of the fork
        server, so the endpoint process never imports pandas.
    state : ServingState
        Where the ``ml.predict_query`` audit events go.
    flush_rows : int
        Buffered rows that trigger a flush (``record_flush_rows``).
    drift : callable, optional
        ``drift(rows) -> list of str``: the drift check of each input row (a dict of its request
        values; default: none).
    max_buffer_rows : int, default 100000
        Rows kept while the table cannot be written; older ones are dropped beyond it.
    """

    def __init__(self, *, write: Callable[[list[dict[str, Any]]], None], state: ServingState, endpoint: str,
                 model_name: str, flush_rows: int, drift: Callable[[list[dict[str, Any]]], list[str]] | None = None,
                 max_buffer_rows: int = 100_000) -> None:
        self._write = write
        self._state = state
        self.endpoint = endpoint
        self.model_name = model_name
        self.flush_rows = flush_rows
        self.max_buffer_rows = max_buffer_rows
        self._drift = drift
        self._pending: list[Answered] = []
        self._rows: list[dict[str, Any]] = []
        self._buffered = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.rows_written = 0
        self.flushes = 0
        self.rows_dropped = 0
        self.last_error = ""

    @property
    def buffered(self) -> int:
        return self._buffered + len(self._rows)

    def add(self, answered: Answered) -> bool:
        """Buffer one answered request; True when a flush is due."""
        with self._lock:
            self._pending.append(answered)
            self._buffered += len(answered.rows)
            overflow = self.buffered - self.max_buffer_rows
            if overflow > 0 and self._rows:  # rows a failed write left behind go first
                dropped = min(overflow, len(self._rows))
                del self._rows[:dropped]
                self.rows_dropped += dropped
            return self.buffered >= self.flush_rows

    def _records(self, pending: list[Answered]) -> tuple[list[dict[str, Any]], list[AuditEvent]]:
        inputs = [raw for answered in pending for raw in answered.inputs]
        drift = self._drift(inputs) if self._drift is not None and inputs else ["no_reference"] * len(inputs)
        records, events, at = [], [], 0
        for answered in pending:
            when = datetime.fromtimestamp(answered.received_at, tz=timezone.utc)
            checks = drift[at:at + len(answered.rows)]
            at += len(answered.rows)
            for i, (raw, row, check) in enumerate(zip(answered.inputs, answered.rows, checks)):
                prediction = row.get("prediction")
                records.append({
                    "request_id": answered.request_id, "endpoint": self.endpoint, "received_at": when,
                    "row_index": i, "model_name": self.model_name, "model_version": row.get("model_version"),
                    "served": row.get("served"), "latency_ms": answered.latency_ms, "drift_check": check,
                    "input": json.dumps(raw, sort_keys=True, allow_nan=False),
                    "prediction": None if prediction is None else str(prediction),
                    "probability": row.get("probability"), "scoring_status": row.get("scoring_status"),
                    "exclusion_reason": row.get("exclusion_reason"),
                    "feature_tables": None if row.get("feature_tables") is None
                    else json.dumps(row["feature_tables"], sort_keys=True),
                    "outputs": other_outputs(row),
                })
            versions = sorted({r.get("model_version") for r in answered.rows if r.get("model_version") is not None})
            events.append(AuditEvent(answered.received_at, "ml.predict_query", self.endpoint, {
                "request_id": answered.request_id, "rows": len(answered.rows), "model_versions": versions,
                "served": answered.rows[0].get("served") if answered.rows else None,
                "latency_ms": round(answered.latency_ms, 3),
                "drifted_rows": sum(c not in ("ok", "no_reference") for c in checks)}))
        return records, events

    def flush(self) -> int:
        """Append every buffered row in one commit and write the buffered audit events.

        Returns the number of rows written (0 when the buffer was empty, or the records could not
        be built or written: the requests and rows stay buffered for the next flush, their audit
        events too when the records could not be built).
        """
        with self._flush_lock:
            with self._lock:
                pending, self._pending, self._buffered = self._pending, [], 0
                rows, self._rows = self._rows, []
            try:
                new_rows, events = self._records(pending)
            except Exception as err:  # a drift or encoding fault: keep every request for the next flush
                self.last_error = f"{type(err).__name__}: {err}"
                with self._lock:
                    self._pending[:0] = pending
                    self._buffered += sum(len(answered.rows) for answered in pending)
                    self._rows[:0] = rows
                return 0
            if events:
                self._state.audit_many(events)
            rows += new_rows
            if not rows:
                return 0
            try:
                self._write(rows)
            except Exception as err:  # keep the rows; the status shows the error
                self.last_error = f"{type(err).__name__}: {err}"
                with self._lock:
                    self._rows[:0] = rows
                return 0
            self.rows_written += len(rows)
            self.flushes += 1
            self.last_error = ""
            return len(rows)

    def summary(self) -> dict[str, Any]:
        return {"buffered_rows": self.buffered, "rows_written": self.rows_written, "flushes": self.flushes,
                "rows_dropped": self.rows_dropped, "last_error": self.last_error}


def records_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The records as a frame with fixed nullable dtypes (the inference table's schema), shape
    (len(rows), len(COLUMNS)); built by the writer (a child of the fork server)."""
    import pandas as pd  # the writer only

    frame = pd.DataFrame(rows, columns=COLUMNS)
    strings = ["request_id", "endpoint", "model_name", "served", "drift_check", "input", "prediction",
               "scoring_status", "exclusion_reason", "feature_tables", "outputs"]
    for name in strings:
        frame[name] = pd.array(frame[name].tolist(), dtype="string")
    frame["received_at"] = pd.to_datetime(frame["received_at"], utc=True).astype("datetime64[us, UTC]")
    frame["row_index"] = pd.array(frame["row_index"].tolist(), dtype="Int64")
    frame["model_version"] = pd.array(frame["model_version"].tolist(), dtype="Int64")
    frame["latency_ms"] = pd.array(frame["latency_ms"].tolist(), dtype="Float64")
    frame["probability"] = pd.array(frame["probability"].tolist(), dtype="Float64")
    return frame



def other_outputs(row: dict[str, Any]) -> str | None:
    """JSON text (sorted keys) of an answered row's columns outside :data:`STANDARD`, or None.

    >>> other_outputs({"prediction": None, "a_prediction": 1, "late_risk": 0.5, "served": "warm"})
    '{"a_prediction": 1, "late_risk": 0.5}'
    """
    other = {k: v for k, v in row.items() if k not in STANDARD}
    return json.dumps(other, sort_keys=True, allow_nan=False) if other else None
