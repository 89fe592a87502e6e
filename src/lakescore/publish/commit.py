"""The exactly-once commit loop, written once for every engine.

One attempt: read the target from one snapshot -> decide (:func:`lakescore.publish.plan.decide`)
-> run the key checks (a missing table is created only once the rows' own keys pass them: by the
commit of the rows where the engine can, Spark Delta, else by an empty create first) -> create
the files (or stage the write) -> commit pinned to the snapshot, with the receipt and the app
transaction -> read back whether the commit landed -> keep its receipt in the receipts table.
A commit that loses the race is cleaned up (its own files only) and the next attempt plans again,
so a racing replay becomes a no-op and a stale plan an error, never a duplicate.

Each engine is a :class:`Writer`: :class:`lakescore.publish.delta_rs.DeltaRsWriter` (the
single-node route, the serving inference table) and
:class:`lakescore.publish.spark_delta.SparkDeltaWriter` (the Spark route). They only read and
write; every decision, check and message is here or in :mod:`lakescore.publish.plan`.

Whether a commit landed is read from the table's app transaction for ``request.app_id`` (Delta
keeps it across checkpoints and log cleanup) together with the receipt of that transaction
version: a commit of this app at the version this attempt planned must carry a receipt. When the
app transaction says a commit landed but no receipt for it can be read back (an engine that
drops ``userMetadata``), the loop stops with :class:`lakescore.errors.ReceiptUnreadableError`
and never writes again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lakescore.errors import PublishConflictError, PublishError, ReceiptUnreadableError
from lakescore.publish.plan import (
    Decision,
    PublishRequest,
    TargetState,
    build_receipt,
    check_period_nulls,
    decide,
    first_commit,
)

if TYPE_CHECKING:  # annotations only
    from lakescore.config import ModelChangeMode

MAX_ATTEMPTS = 8
FAULT_ENV = "LAKESCORE_FAULT_PAUSE"  # fault tests only: "<before_commit|after_commit>:<marker path>"


class CommitLost(Exception):
    """Raised by :meth:`Writer.commit` when another commit landed on the snapshot first (the
    writer has not committed anything). Internal: the loop plans again."""


@dataclass(frozen=True)
class Period:
    """The rows a ``replace_period`` commit replaces: ``start <= column < end`` (dates compare on
    their day); ``delta_type`` is the column's Delta type in the target."""

    column: str
    start: str
    end: str
    delta_type: str = "timestamp"

    def predicate(self, quote: str = '"') -> str:
        """SQL predicate of the period, with ``quote`` around the column name (``"`` for
        delta-rs, a backtick for Spark SQL)."""
        start, end = self.start, self.end
        if "date" in self.delta_type and "timestamp" not in self.delta_type:
            start, end = start[:10], end[:10]
        return f"{quote}{self.column}{quote} >= '{start}' AND {quote}{self.column}{quote} < '{end}'"


WITHIN_RUN = "within this run"  # RepeatedKeys.where of keys repeated among the rows themselves


@dataclass(frozen=True)
class RepeatedKeys:
    """Record keys an engine found stored twice: how many, up to three of them (smallest first),
    and where (:data:`WITHIN_RUN` or ``already in <table>``)."""

    count: int
    examples: tuple[dict[str, Any], ...]
    where: str


class PublicationTarget(Protocol):
    """A prediction table's publication state as one engine reads it, without rows to write:
    :class:`lakescore.publish.state.DeltaRsTarget` or
    :class:`lakescore.publish.spark_delta.SparkDeltaTarget` (each writer reads through one).
    ``table`` is the three-part name, for messages."""

    table: str

    def read(self) -> TargetState:
        """The target at its newest version, from one snapshot (``exists=False`` when missing)."""
        ...

    def receipts(self) -> list[dict[str, Any]]:
        """Every lakescore receipt of the table, newest first (empty when it does not exist)."""
        ...


class Writer(Protocol):
    """What the loop needs from an engine. One writer object serves one publication.

    ``read`` loads one snapshot of the target and remembers it: ``repeated_keys`` and ``commit``
    work against that snapshot until the next ``read``. ``table`` is the three-part name, for
    messages.
    """

    table: str

    def read(self) -> TargetState:
        """The target at its newest version, from one snapshot: schema, files, receipts (log and
        receipts table merged) and the app transaction of the request's app id."""
        ...

    def read_landed(self, run_id: str, txn_version: int) -> TargetState:
        """The target after a commit: at least what :func:`landed` needs to tell whether run
        ``run_id``'s commit at ``txn_version`` landed (its receipt, the table id, the app
        transaction); an engine may skip reads that cannot change that answer."""
        ...

    def keep_receipts(self, found: list[dict[str, Any]]) -> int:
        """Append to the receipts table the receipts of ``found`` it lacks; returns how many."""
        ...

    def create(self) -> bool:
        """Create the empty table with the rows' schema (nothing when another publisher did) and
        say so (True); or create nothing and say False where the writer's commit creates a missing
        table with the rows (Spark Delta), so that the commit is made against no version."""
        ...

    def period_nulls(self, column: str) -> int:
        """Rows whose ``column`` is null, counted where the rows are (0 without the column)."""
        ...

    def repeated_keys(self, keys: list[str], *, against_table: bool) -> RepeatedKeys | None:
        """Keys stored twice within the rows, else (``against_table``) already in the snapshot;
        computed where the rows are, only counts and examples come back."""
        ...

    def stage(self, decision: Decision) -> Any:
        """Write what can be written before the commit (files no snapshot references yet)."""
        ...

    def commit(self, staged: Any, request: PublishRequest, decision: Decision, receipt: dict[str, Any],
               period: Period | None) -> None:
        """Commit ``staged`` (or the rows) against the snapshot read, as version
        ``decision.txn_version``, with ``receipt`` in ``userMetadata`` and the app transaction
        ``(request.app_id, decision.txn_version)``; raise :class:`CommitLost` when another commit
        landed first."""
        ...

    def discard(self, staged: Any) -> None:
        """Remove what ``stage`` wrote, after a lost race (never referenced by any version)."""
        ...


def check_keys(found: RepeatedKeys | None, *, table: str) -> None:
    """Refuse a publication that would store a record key twice.

    Parameters
    ----------
    found : RepeatedKeys or None
        What :meth:`Writer.repeated_keys` counted where the rows are (None: no key repeats).
    table : str
        The prediction table, for the message.

    Raises
    ------
    PublishError
        Naming how many keys repeat, a few of them, and the fix: every source row is scored once,
        so a repeated key means the source re-inserted a row.
    """
    if found is None or found.count == 0:
        return
    examples = list(found.examples)
    raise PublishError(
        f"{found.count} record key(s) {found.where} (e.g. {examples}); publishing would store a row twice. "
        "The source holds or re-inserted duplicate keys: deduplicate it, or rebuild the table from a "
        "pinned snapshot with `lakescore publish --recover-predictions`.",
        table=table, keys=examples,
    )


def fault_pause(point: str) -> None:
    """Fault-injection hook for the crash and race tests; does nothing unless ``LAKESCORE_FAULT_PAUSE``
    is ``<point>:<marker>``. Then it writes the marker (with the pid) and waits, up to 120 s, for
    ``<marker>.go`` to appear: the test kills the process meanwhile, or releases it."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith(f"{point}:"):
        return
    marker = Path(spec.split(":", 1)[1])
    marker.write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not marker.with_name(marker.name + ".go").exists():
        time.sleep(0.01)


def period_of(request: PublishRequest, target: TargetState, column: str | None) -> Period | None:
    """The :class:`Period` a request replaces (None when it has no bounds or no column), typed as
    the target holds the column (as the rows do, for a table their commit creates)."""
    if request.period_start is None or request.period_end is None or column is None:
        return None
    held = dict(target.schema if target.exists else request.schema)
    return Period(column, request.period_start, request.period_end, held.get(column, "timestamp"))


def landed(after: TargetState, request: PublishRequest, decision: Decision) -> dict[str, Any] | None:
    """The receipt of this attempt's commit in ``after`` (the target read back after committing),
    or None when another publisher's commit took that app transaction version.

    Raises
    ------
    ReceiptUnreadableError
        The table records no app transaction at ``decision.txn_version`` or later for
        ``request.app_id`` (the engine dropped it), or it does but no receipt of that version
        can be read back: the commit is not written again.
    """
    taken = [r for r in after.receipts if r.get("app_id") == request.app_id
             and r.get("target_table_id") == after.table_id and r.get("txn_version") == decision.txn_version]
    ours = [r for r in taken if r.get("run_id") == request.run_id and r.get("request_digest") == request.digest]
    if ours:
        return ours[0]
    if after.app_txn is not None and after.app_txn >= decision.txn_version and taken:
        return None  # another publisher of this app committed at that version first: plan again
    recorded = "no app transaction" if after.app_txn is None else f"app transaction v{after.app_txn}"
    raise ReceiptUnreadableError(
        f"{request.prediction_table}: the write of run {request.run_id} (app transaction {request.app_id} "
        f"v{decision.txn_version}) returned, the table records {recorded}, and no receipt of v"
        f"{decision.txn_version} can be read back from its history (the engine dropped userMetadata or the "
        "app transaction). It is not written again. Check DESCRIBE HISTORY of the table, publish with a "
        "writer that keeps userMetadata (a path-based Spark Delta write, or delta-rs), then run "
        "lakescore publish --recover-predictions.",
        table=request.prediction_table, run_id=request.run_id, txn_version=decision.txn_version)


def publish_once(writer: Writer, request: PublishRequest, *, allow_empty: bool = False,
                 model_change_mode: ModelChangeMode = "incremental_append", migrate: bool = False,
                 period_column: str | None = None, keys: list[str] | None = None,
                 pause: Callable[[str], None] = fault_pause,
                 complete: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 **facts: Any) -> tuple[Decision, int | None, dict[str, Any] | None]:
    """Commit the writer's rows to its table exactly once for ``request``.

    Parameters
    ----------
    writer : Writer
        The engine (delta-rs or Spark Delta), holding the rows and the table location.
    request : PublishRequest
    allow_empty, model_change_mode, migrate
        Passed to :func:`lakescore.publish.plan.decide`.
    period_column : str or None
        The column ``replace_period`` filters on; a snapshot with null values in it is refused
        (:func:`~lakescore.publish.plan.check_period_nulls`).
    keys : list of str, optional
        Record keys: refused when a key repeats within the rows, or (on append) when the
        snapshot already holds it (:func:`check_keys`). The rows' own keys are checked before
        a missing table is created, so a refused first publication leaves no table.
    pause : callable, default :func:`fault_pause`
        Called with ``"before_create"`` (the table is missing, about to be created, empty or by
        the commit of the rows),
        ``"before_commit"`` (files written, nothing committed) and ``"after_commit"`` (committed,
        receipt not yet in the receipts table); for fault and race tests.
    complete : callable, optional
        ``receipt -> receipt``: called once the commit landed, with its receipt as read back;
        what it returns is kept in the receipts table and returned (the one pass adds the
        counts its commit observed, :meth:`lakescore.scoring.run.OnePass.complete`).
    **facts
        Run facts for the receipt (certificate_sha256, rows_in, predicted, excluded, ...).

    Returns
    -------
    (Decision, int or None, dict or None)
        The decision, the table version after it (unchanged for a no-op), and the receipt
        committed, as read back with its ``table_version`` and ``committed_at`` (for a replay:
        the receipt found).

    Raises
    ------
    PublishConflictError
        Still losing the commit race after 8 attempts (the table is unchanged by this writer).
    ReceiptUnreadableError
        A commit landed whose receipt cannot be read back (see :func:`landed`).
    PublishError
        A repeated record key, a null period, or any refusal of
        :func:`~lakescore.publish.plan.decide`.
    """
    if request.mode == "snapshot" and period_column:
        check_period_nulls(request.source_table, request.source_version_to, period_column,
                           writer.period_nulls(period_column))
    last_error: Exception | None = None
    for attempt in range(MAX_ATTEMPTS):
        state = writer.read()
        if state.exists:
            writer.keep_receipts(list(state.receipts))  # back-fill: the log may be cleaned before the next run
        decision = decide(request, state, allow_empty=allow_empty, model_change_mode=model_change_mode,
                          migrate=migrate)
        if decision.action == "noop":
            return decision, state.version, decision.replayed
        if decision.action == "create":
            if keys:  # a run refused for its own keys leaves no table behind
                check_keys(writer.repeated_keys(keys, against_table=False), table=request.prediction_table)
            pause("before_create")
            if writer.create():
                continue  # plan again, against the empty table
            decision = first_commit(request)  # the commit below creates the table with the rows
        elif keys:
            check_keys(writer.repeated_keys(keys, against_table=decision.action == "append"),
                       table=request.prediction_table)
        receipt = build_receipt(request, decision, state, **facts)
        staged = writer.stage(decision)
        pause("before_commit")
        try:
            writer.commit(staged, request, decision, receipt,
                          period_of(request, state, period_column) if decision.action == "replace_period" else None)
        except CommitLost as err:
            writer.discard(staged)  # never committed: nobody else can reference them
            last_error = err
            time.sleep(0.05 * attempt)
            continue
        pause("after_commit")
        ours = landed(writer.read_landed(request.run_id, decision.txn_version), request, decision)
        if ours is None:
            last_error = CommitLost(f"another publisher of {request.app_id} committed v{decision.txn_version} first")
            continue
        if complete is not None:
            ours = complete(ours)
        writer.keep_receipts([ours])
        return decision, int(ours["table_version"]), ours
    raise PublishConflictError(
        f"could not commit to {request.prediction_table} after {MAX_ATTEMPTS} attempts: other commits kept "
        f"landing first ({last_error}). Nothing was written by this run; re-run the publish, it is safe "
        "to repeat.", table=request.prediction_table)
