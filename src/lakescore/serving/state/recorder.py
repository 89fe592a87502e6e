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

Each flush is one batch with its own app transaction (``app_id`` of this recorder, ``version`` its
batch number; :class:`RecordBatch`): a batch whose write failed is retried as itself, before the
newer rows, and lands once even when the failed write had committed after all (a write child
killed at its time-out) or still races its retry.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakescore.serving.state.store import AuditEvent, ServingState

if TYPE_CHECKING:  # pandas is imported when a flush builds a frame
    import pandas as pd

COLUMNS = ["request_id", "endpoint", "received_at", "row_index", "model_name", "model_version", "served",
           "latency_ms", "drift_check", "input", "prediction", "probability", "scoring_status", "exclusion_reason",
           "feature_tables", "outputs"]
STANDARD = frozenset(("prediction", "probability", "scoring_status", "exclusion_reason", "model_version", "served",
                      "feature_tables"))
"""The answer keys recorded in columns of their own; every other key goes to ``outputs``."""


@dataclass(frozen=True)
class RecordBatch:
    """One flush's records and the app transaction that appends them once: ``app_id`` names the
    recorder (endpoint and a fresh id per recorder), ``version`` numbers its batches from 0."""

    app_id: str
    version: int
    records: list[dict[str, Any]] = field(default_factory=list)


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
        ``write(batch)`` appends a :class:`RecordBatch` (its records: one dict per answered row,
        the keys of :data:`COLUMNS`) to the inference table once, e.g. ``runtime.append_once(name,
        records_frame(batch.records), app_id=batch.app_id, version=batch.version)``; the endpoint
        runs that in a child of the fork server, so the endpoint process never imports pandas.
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

    def __init__(self, *, write: Callable[[RecordBatch], None], state: ServingState, endpoint: str,
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
        self._kept: list[RecordBatch] = []  # batches whose write failed, oldest first
        self._buffered = 0
        self.app_id = f"lakescore-inference-{endpoint}-{uuid.uuid4().hex}"
        self._batches = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.rows_written = 0
        self.flushes = 0
        self.rows_dropped = 0
        self.last_error = ""

    @property
    def buffered(self) -> int:
        return self._buffered + sum(len(b.records) for b in self._kept)

    def add(self, answered: Answered) -> bool:
        """Buffer one answered request; True when a flush is due."""
        with self._lock:
            self._pending.append(answered)
            self._buffered += len(answered.rows)
            overflow = self.buffered - self.max_buffer_rows
            while overflow > 0 and self._kept:  # rows a failed write left behind go first
                oldest = self._kept[0]
                dropped = min(overflow, len(oldest.records))
                del oldest.records[:dropped]  # the batch keeps its version: it lands once, or not at all
                if not oldest.records:
                    self._kept.pop(0)
                self.rows_dropped += dropped
                overflow -= dropped
            return self.buffered >= self.flush_rows

    def _records(self, pending: list[Answered]) -> tuple[list[dict[str, Any]], list[AuditEvent]]:
        inputs = [raw for answered in pending for raw in answered.inputs]
        drift = self._drift(inputs) if self._drift is not None and inputs else ["no_reference"] * len(inputs)
        records, events, at = [], [], 0
        for answered in pending:
            when = datetime.fromtimestamp(answered.received_at, tz=UTC)
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
            versions = sorted({r.get("model_version") for r in answered.rows if r.get("model_version") is not None})  # type: ignore[type-var]  # None is filtered out
            events.append(AuditEvent(answered.received_at, "ml.predict_query", self.endpoint, {
                "request_id": answered.request_id, "rows": len(answered.rows), "model_versions": versions,
                "served": answered.rows[0].get("served") if answered.rows else None,
                "latency_ms": round(answered.latency_ms, 3),
                "drifted_rows": sum(c not in ("ok", "no_reference") for c in checks)}))
        return records, events

    def flush(self) -> int:
        """Append the buffered rows, one commit per batch, and write the buffered audit events:
        first each batch a failed write left behind (as itself), then the new rows as a new batch.

        Returns the number of rows written (0 when the buffer was empty, or the records could not
        be built or written: the requests and rows stay buffered for the next flush, their audit
        events too when the records could not be built).
        """
        with self._flush_lock:
            with self._lock:
                pending, self._pending, self._buffered = self._pending, [], 0
                batches, self._kept = self._kept, []
            try:
                new_rows, events = self._records(pending)
            except Exception as err:  # a drift or encoding fault: keep every request for the next flush
                self.last_error = f"{type(err).__name__}: {err}"
                with self._lock:
                    self._pending[:0] = pending
                    self._buffered += sum(len(answered.rows) for answered in pending)
                    self._kept[:0] = batches
                return 0
            if events:
                self._state.audit_many(events)
            if new_rows:
                batches.append(RecordBatch(self.app_id, self._batches, new_rows))
                self._batches += 1
            written = 0
            for i, batch in enumerate(batches):
                try:
                    self._write(batch)
                except Exception as err:  # keep this batch and the later ones; the status shows the error
                    self.last_error = f"{type(err).__name__}: {err}"
                    with self._lock:
                        self._kept[:0] = batches[i:]
                    return written
                written += len(batch.records)
                self.rows_written += len(batch.records)
                self.flushes += 1
            if batches:
                self.last_error = ""
            return written

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
