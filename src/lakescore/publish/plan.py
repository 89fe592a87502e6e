"""Pure publication decisions over table metadata: what to read, what to write, or why not.

Nothing here touches a table. The readers (:mod:`lakescore.publish.state` locally, the Spark
writer on Databricks) turn table metadata into :class:`SourceState` and :class:`TargetState`;
these functions decide, and every engine's writer carries the decision out with the same
messages.

Two decisions, one before scoring and one at the commit:

- :func:`plan_scope`: which source rows a run scores (the pinned snapshot, the change data feed
  window after the watermark, or nothing) and how they will be committed (append, replace a
  period, replace the table);
- :func:`decide`: against the target version the writer just read, is this request a replay
  (found through its receipt), a conflict, stale, a refused model or schema change, or a write?

The watermark is the source version stored in the receipt of the target's last lakescore commit,
bound to the source and target table ids it was written for. Receipts must outlive the commit
history: OPTIMIZE, VACUUM, checkpoints and log cleanup (``delta.logRetentionDuration``) all erase
``userMetadata`` from what a reader can see. So every receipt lives in two places:

- the commit's ``userMetadata``, atomically with the rows (the source of truth while the commit
  is still in the log);
- the receipts table ``<prediction_table>_lakescore_receipts`` (:func:`receipts_table_for`), one
  row per commit, appended right after the commit and back-filled from the log by every
  publication (its rows are data, which no maintenance removes).

Readers merge both (:func:`merge_receipts`). The Delta app transaction (``txnAppId``/``txnVersion``
= the target version the commit creates) rides along with every commit and is kept in every
checkpoint; it is the cross-check that makes the two-step record safe: when it names a commit
whose receipt is in neither place (the process stopped between the commit and the receipts row,
and the log was cleaned before anyone back-filled it), the watermark is unknown and publication
asks for recovery instead of guessing (:func:`check_receipts_complete`). The guard itself is this
module, applied to the snapshot the commit is made against (delta-rs records app transactions
without enforcing them).

A receipt is a watermark only while the table still holds the rows it describes. A commit after
the newest receipt that removes data (a ``remove`` action with ``dataChange=true``: RESTORE,
DELETE, an overwrite, a MERGE or UPDATE by someone else) breaks that: publishing on from the
receipt would never write the removed rows again (RESTORE even keeps the app transaction). The
readers list the commits after the newest receipt (:class:`LaterCommit`, from the log) and
:func:`check_watermark_holds` refuses them (``predictions_rewritten``), naming the commit and the
fix, ``--recover-predictions`` (one replacement of the whole table from a pinned snapshot).
Maintenance rewrites files without changing rows (OPTIMIZE, compaction, ZORDER, REORG write
``dataChange=false``; VACUUM and property changes remove nothing) and keeps the watermark. The
check is blind to commits that log cleanup removed (older than ``delta.logRetentionDuration``).

Table properties were not chosen: Spark Delta cannot set them in the same commit as an append,
and a list of receipts does not belong in a table's configuration.

A snapshot (``publication.mode: snapshot``) replaces the rows of the UTC days its
``period_column`` spans. A null period belongs to no day: such a row could never be replaced by a
later snapshot (each one would add it again), so a snapshot with null periods is refused before
scoring (:func:`check_period_nulls`) and again before the commit, naming the column and the count.
An incremental publication appends and never filters on the period, so nulls are allowed there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from lakescore.errors import (
    CdfRecoveryRequiredError,
    ChangeFeedDisabledError,
    ModelChangeError,
    NullPeriodError,
    PredictionsRewrittenError,
    PublishConflictError,
    SchemaChangeError,
    SourceChangedError,
    StalePlanError,
)

if TYPE_CHECKING:  # annotations only
    from lakescore.config import BatchCompute, ModelChangeMode, PublicationConfig, PublicationMode
from lakescore.publish.receipts import (  # noqa: F401  (parse_receipt and the constants are re-exported)
    RECEIPT_FORMAT,
    RECEIPT_MARKER,
    RECEIPTS_SUFFIX,
    merge_receipts,
    parse_receipt,
    receipt_rows,
    receipts_table_for,
)
from lakescore.runtime.base import DeltaEngine

Action = Literal["create", "append", "replace_period", "replace_table", "noop"]
Read = Literal["snapshot", "cdf", "none"]


def app_id_for(job_name: str, target: str, prediction_table: str) -> str:
    """The app transaction id of a job: ``lakescore/<job>/<target>/<table>`` (stable across runs)."""
    return f"lakescore/{job_name}/{target}/{prediction_table}"


def config_digest(publication: Any) -> str:
    """SHA-256 of the publication settings that change what a commit means (mode, period, policies)."""
    body = {k: getattr(publication, k) for k in ("mode", "period_column", "source_change_policy",
                                                 "model_change_mode", "allow_empty")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# --- states ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Watermark:
    """The last lakescore commit of a prediction table, as its receipt describes it."""

    source_version: int
    source_table_id: str
    target_table_id: str
    model_name: str
    model_version: int
    run_id: str
    table_version: int


@dataclass(frozen=True)
class LaterCommit:
    """A commit of the prediction table after its newest receipt, as its log describes it.

    ``data_removes`` counts its ``remove`` actions with ``dataChange=true`` (files whose rows
    left the table); ``None`` when only the history could be read, not the log's actions (then
    ``operation`` and ``mode``, ``operationParameters.mode``, decide). A file rewritten with
    ``dataChange=false`` (OPTIMIZE) is not counted.
    """

    version: int
    operation: str
    data_removes: int | None
    mode: str | None = None


# Operations that can remove rows, for a commit whose actions could not be read (its history only).
REMOVING_OPERATIONS = frozenset({"DELETE", "UPDATE", "MERGE", "RESTORE", "TRUNCATE", "REPLACE TABLE",
                                 "CREATE OR REPLACE TABLE", "REPLACE TABLE AS SELECT",
                                 "CREATE OR REPLACE TABLE AS SELECT"})


def removes_rows(commit: LaterCommit) -> bool:
    """Whether ``commit`` removed rows from the table: a ``remove`` action with ``dataChange=true``
    (Delta protocol, "Add File and Remove File"), or, when its actions are unknown, an operation
    of :data:`REMOVING_OPERATIONS` or a write in ``Overwrite`` mode."""
    if commit.data_removes is not None:
        return commit.data_removes > 0
    operation = commit.operation.upper()
    return operation in REMOVING_OPERATIONS or (str(commit.mode or "").lower() == "overwrite")


@dataclass(frozen=True)
class SourceState:
    """The score source at the pinned version.

    ``oldest_version`` is the oldest commit still in its log among the versions the window needs
    (None when no window was looked at).
    """

    table: str
    table_id: str
    version: int
    cdf_enabled: bool
    oldest_version: int | None = None


@dataclass(frozen=True)
class TargetState:
    """The prediction table at the version a writer read (``exists=False``: not created yet).

    ``schema`` holds ``(column, delta type)`` pairs; ``receipts`` the lakescore receipts of the
    table, from its log and its receipts table (:func:`merge_receipts`), newest first, each with
    its ``table_version``. ``app_txn`` is the app transaction version the table records for
    ``app_id`` (None when it records none, or the engine cannot read it). ``later_commits`` are
    the commits after the newest receipt of this table, oldest first, as far as the log still
    holds them (:func:`check_watermark_holds`).
    """

    table: str
    exists: bool
    version: int | None = None
    table_id: str | None = None
    schema: tuple[tuple[str, str], ...] = ()
    has_rows: bool = False
    receipts: tuple[dict[str, Any], ...] = ()
    app_id: str | None = None
    app_txn: int | None = None
    later_commits: tuple[LaterCommit, ...] = ()

    @property
    def watermark(self) -> Watermark | None:
        """The newest receipt as a :class:`Watermark`, or None when the table has none."""
        if not self.receipts:
            return None
        r = self.receipts[0]
        return Watermark(int(r["watermark_after"]), r["source_table_id"], r["target_table_id"],
                         r["model_name"], int(r["model_version"]), r["run_id"], int(r["table_version"]))


def check_receipts_complete(target: TargetState) -> None:
    """Refuse to trust a watermark when the table's app transaction names a newer commit of the
    same job than any receipt found.

    Raises
    ------
    CdfRecoveryRequiredError
        Naming the commit version, the app id and the fix (``--recover-predictions``).
    """
    if target.app_txn is None or not target.exists:
        return
    known = [int(r["table_version"]) for r in target.receipts
             if r.get("app_id") == target.app_id and r.get("target_table_id") == target.table_id]
    if known and max(known) >= target.app_txn:
        return
    raise CdfRecoveryRequiredError(
        f"{target.table}: its app transaction {target.app_id} records a lakescore commit at v{target.app_txn}, "
        f"but the receipt of that commit is neither in the table's log nor in {receipts_table_for(target.table)} "
        "(the publishing process stopped before recording it, and the log was cleaned since), so its "
        "watermark is unknown. Rebuild from a pinned snapshot: lakescore publish --recover-predictions",
        table=target.table, version=target.app_txn)


def rewriting_commit(target: TargetState) -> LaterCommit | None:
    """The first commit after ``target``'s newest receipt that removed rows (:func:`removes_rows`),
    or None: the receipt still describes the table."""
    wm = target.watermark if target.exists else None
    if wm is None or wm.target_table_id != target.table_id:
        return None
    return next((c for c in sorted(target.later_commits, key=lambda c: c.version)
                 if c.version > wm.table_version and removes_rows(c)), None)


def check_watermark_holds(target: TargetState) -> None:
    """Refuse a watermark whose rows the table no longer holds: a commit after the newest receipt
    removed rows (RESTORE, DELETE, an overwrite, a MERGE or UPDATE by someone else), so
    publishing on from that receipt would never write them again.

    Raises
    ------
    PredictionsRewrittenError
        Naming the table, the commit version and operation, the receipt, and the fix
        (``--recover-predictions``).
    """
    commit, wm = rewriting_commit(target), target.watermark
    if commit is None or wm is None:
        return
    what = (f"removed {commit.data_removes} data file(s)" if commit.data_removes is not None
            else "can remove rows (its log actions could not be read)")
    raise PredictionsRewrittenError(
        f"{target.table}: commit v{commit.version} ({commit.operation}) {what} after lakescore's last receipt "
        f"(v{wm.table_version}, run {wm.run_id}, source up to v{wm.source_version}), so the table no longer "
        "holds every prediction that receipt describes and publishing on from it would never write the removed "
        "rows again. Nothing was written. Rebuild the table from a pinned snapshot in one commit: "
        "lakescore publish --recover-predictions",
        table=target.table, version=commit.version, operation=commit.operation,
        watermark_version=wm.table_version)


def check_period_nulls(source: str, version: int, column: str, nulls: int) -> None:
    """Refuse a snapshot whose ``period_column`` has null rows (see the module docstring).

    Parameters
    ----------
    source : str
        The score source (or the scored run) the rows come from, for the message.
    version : int
        Its pinned version.
    column : str
        ``publication.period_column``.
    nulls : int
        Rows whose ``column`` is null, counted by the engine (delta-rs or Spark).

    Raises
    ------
    NullPeriodError
        When ``nulls > 0``, naming the column, the count and the fixes.
    """
    if nulls <= 0:
        return
    raise NullPeriodError(
        f"{source} v{version} has {nulls} row(s) with a null publication.period_column {column!r}. A snapshot "
        f"replaces the rows of the days its {column} values span, and a row without a {column} belongs to no "
        "day: no later snapshot could replace it, so nothing was written. Fill "
        f"{column} at the source (or score a view without those rows), or set publication.mode: incremental.",
        table=source, column=column, rows=nulls)


# --- scope: what a run scores ------------------------------------------------------------------

@dataclass(frozen=True)
class Scope:
    """What one run reads from the source and how its predictions will be committed.

    ``read`` is ``snapshot`` (the whole source at ``source_version_to``), ``cdf`` (inserted rows of
    versions ``source_version_from``..``source_version_to``) or ``none`` (a no-op).
    """

    action: Action
    read: Read
    source_table_id: str
    source_version_from: int | None
    source_version_to: int
    watermark_before: int | None
    reason: str
    recovery: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Scope:
        return cls(**body)


def _check_binding(wm: Watermark, target: str, target_id: str | None, source: str, source_id: str) -> None:
    if wm.target_table_id == target_id and wm.source_table_id == source_id:
        return
    table, bound, now = ((target, wm.target_table_id, target_id) if wm.target_table_id != target_id
                         else (source, wm.source_table_id, source_id))
    raise CdfRecoveryRequiredError(
        f"the watermark of {target} (source v{wm.source_version}, run {wm.run_id}) is bound to table id "
        f"{bound} of {table}, which now has id {now} (it was recreated or copied). Rebuild from a "
        "pinned snapshot: lakescore publish --recover-predictions",
        table=target, source_version=wm.source_version,
    )


def _model_changed(wm: Watermark, model_name: str, model_version: int) -> bool:
    return (wm.model_name, wm.model_version) != (model_name, model_version)


def _reject_model_change(table: str, wm: Watermark, model_name: str, model_version: int) -> None:
    raise ModelChangeError(
        f"{table} holds predictions of {wm.model_name} v{wm.model_version} (run {wm.run_id}, table "
        f"v{wm.table_version}); this run scored with {model_name} v{model_version} and "
        "publication.model_change_mode is 'reject'. Pin model_version: "
        f"{wm.model_version} in config/inference.yml, or set model_change_mode: incremental_append "
        "or full_rebuild.",
        table=table, held_version=wm.model_version, new_version=model_version,
    )


def plan_scope(publication: PublicationConfig, source: SourceState, target: TargetState, *, model_name: str,
               model_version: int, recover: bool = False) -> Scope:
    """Decide which source rows a run scores, before any scoring.

    Parameters
    ----------
    publication : PublicationConfig
        ``mode``, ``source_change_policy``, ``model_change_mode``, ``allow_empty``.
    source : SourceState
        The source at the pinned version (``oldest_version`` filled when a window is needed).
    target : TargetState
        The prediction table now.
    model_name, model_version : str, int
        The model this run scores with.
    recover : bool, default False
        ``lakescore publish --recover-predictions``: rebuild the table from the pinned snapshot.

    Returns
    -------
    Scope
        A CDF window scope still has to be settled with :func:`settle_window` once its change
        types are read.

    Raises
    ------
    CdfRecoveryRequiredError
        The watermark is bound to other table ids, the table has rows but no receipt, or the
        source log no longer holds the window's first version.
    ChangeFeedDisabledError
        An incremental window on a source without ``delta.enableChangeDataFeed``.
    ModelChangeError
        ``model_change_mode: reject`` and the model differs from the table's.
    PredictionsRewrittenError
        A commit after the newest receipt removed rows (:func:`check_watermark_holds`); a full
        rebuild (recovery, ``model_change_mode: full_rebuild``) is not refused.
    StalePlanError
        A snapshot older than the one the table already holds.
    """
    s, name, sid = source.version, source.table, source.table_id
    wm = target.watermark if target.exists else None
    before = wm.source_version if wm else None
    if recover:
        return Scope("replace_table", "snapshot", sid, None, s, before,
                     f"recovery: rebuild {target.table} from {name} v{s} in one commit",
                     recovery=f"rebuilt from {name} v{s}; watermark before: {before}")
    check_receipts_complete(target)
    if wm is None:
        if target.has_rows:
            raise CdfRecoveryRequiredError(
                f"{target.table} v{target.version} has rows but no lakescore receipt, so its watermark "
                f"is unknown and {name} cannot be published incrementally without duplicates. "
                "Rebuild it from a pinned snapshot: lakescore publish --recover-predictions",
                table=target.table)
        if publication.mode == "snapshot":
            return Scope("replace_period", "snapshot", sid, None, s, None, f"snapshot of {name} v{s}")
        return Scope("append", "snapshot", sid, None, s, None, f"first publication: all of {name} v{s}")
    _check_binding(wm, target.table, target.table_id, name, source.table_id)
    if _model_changed(wm, model_name, model_version):
        if publication.model_change_mode == "reject":
            _reject_model_change(target.table, wm, model_name, model_version)
        if publication.model_change_mode == "full_rebuild":
            return Scope("replace_table", "snapshot", sid, None, s, before,
                         f"model change v{wm.model_version} -> v{model_version}: full rebuild from {name} v{s}")
    check_watermark_holds(target)
    if publication.mode == "snapshot":
        if s < wm.source_version:
            raise _stale(target.table, wm, f"this run pinned {name} v{s}, older than the table's v{wm.source_version}")
        return Scope("replace_period", "snapshot", sid, None, s, before, f"snapshot of {name} v{s}")
    if s <= wm.source_version:
        return Scope("noop", "none", sid, None, s, before,
                     f"replay: no-op (no new versions of {name} since v{wm.source_version}; "
                     f"watermark in {target.table} v{wm.table_version})")
    first = wm.source_version + 1
    if not source.cdf_enabled:
        raise ChangeFeedDisabledError(
            f"{name} does not have change data feed enabled, so versions v{first}..v{s} cannot be read "
            f"incrementally. Run: ALTER TABLE {name} SET TBLPROPERTIES (delta.enableChangeDataFeed = true), "
            "then lakescore publish --recover-predictions once; or set publication.mode: snapshot.",
            table=name)
    if source.oldest_version is not None and source.oldest_version > first:
        raise cdf_recovery(name, target.table, first, s, f"its log starts at v{source.oldest_version}")
    return Scope("append", "cdf", sid, first, s, before, f"{name} v{first}..v{s}: inserted rows")


PublicationPass = Literal["one_pass", "staged"]


def publication_pass(*, batch_compute: BatchCompute, engine: DeltaEngine, publishing: bool,
                     scope: Scope) -> PublicationPass:
    """How a run's predictions reach the prediction table: ``one_pass`` (the UDF's output goes
    straight into the commit, no staged copy) or ``staged`` (written to the run store first,
    published from there: now or by a later ``lakescore publish --run-id``).

    One pass only for a Spark run that publishes as it scores (``lakescore score --publish``) with
    Spark Delta, and only when there are rows to score: the executors compute the predictions
    inside the Delta write, and the counts come from that same pass. ``lakescore score`` alone
    stages (so ``publish --run-id`` can publish it later, or again), and so does the single-node
    route (a pandas frame has no second pass to save).

    Parameters
    ----------
    batch_compute : {"single_node", "spark"}
        ``inference.batch_compute``: the route.
    engine : DeltaEngine
        The publication engine of the route on this placement
        (:func:`lakescore.runtime.base.publication_engine`).
    publishing : bool
        Whether the run is published as it is scored.
    scope : Scope
        What the run scores (a no-op scores nothing: staged, as ever).
    """
    one = (batch_compute == "spark" and engine is DeltaEngine.SPARK_DELTA and publishing
           and scope.action != "noop")
    return "one_pass" if one else "staged"


def cdf_recovery(source: str, target: str, first: int, last: int, why: str) -> CdfRecoveryRequiredError:
    """The error for a change data feed that no longer covers the watermark."""
    return CdfRecoveryRequiredError(
        f"the change data feed of {source} no longer covers the watermark of {target}: versions "
        f"v{first}..v{last} are needed but {why} (vacuumed or cleaned history). Rebuild from a pinned "
        "snapshot in one commit: lakescore publish --recover-predictions",
        table=target, source=source, first_version=first, last_version=last)


def settle_window(scope: Scope, publication: Any, *, source_table: str, inserted: int,
                  changes: dict[int, list[str]]) -> Scope:
    """Finish a CDF window scope once its change types are known.

    Parameters
    ----------
    inserted : int
        Rows with ``_change_type = insert`` in the window.
    changes : dict of int to list of str
        Source version -> the non-insert change types in it (``update_postimage``, ``delete``, ...).

    Returns
    -------
    Scope
        Unchanged for inserts only; a no-op when nothing was inserted (unless ``allow_empty``);
        a full rebuild under ``source_change_policy: rebuild_on_change``.

    Raises
    ------
    SourceChangedError
        An update or delete in the window under ``source_change_policy: reject``, naming the
        versions.
    """
    window = f"v{scope.source_version_from}..v{scope.source_version_to}"
    if changes:
        found = ", ".join(f"v{v}: {'/'.join(sorted(set(kinds)))}" for v, kinds in sorted(changes.items()))
        if publication.source_change_policy == "reject":
            raise SourceChangedError(
                f"{source_table} updated or deleted rows inside the window {window} ({found}); "
                "incremental publication appends inserted rows only, so the published predictions "
                "would no longer match the source. Set publication.source_change_policy: "
                "rebuild_on_change, or run lakescore publish --recover-predictions once.",
                table=source_table, versions=sorted(changes))
        return replace(scope, action="replace_table", read="snapshot", source_version_from=None,
                       reason=f"source change in {window} ({found}): rebuild from {source_table} "
                              f"v{scope.source_version_to}")
    if inserted == 0 and not publication.allow_empty:
        return replace(scope, action="noop", read="none",
                       reason=f"no-op: no inserted rows in {source_table} {window}")
    return scope


def period_bounds(low: Any, high: Any) -> tuple[str, str]:
    """The UTC day boundaries a snapshot replaces: ``[floor(low), floor(high) + 1 day)``.

    Parameters
    ----------
    low, high : timestamp or date
        The smallest and largest ``period_column`` values of the run (naive timestamps are UTC).

    Returns
    -------
    (str, str)
        ISO 8601 instants, e.g. ``("2013-10-01T00:00:00Z", "2013-10-03T00:00:00Z")``.
    """
    import pandas as pd  # only for the timestamp arithmetic

    def day(value: Any) -> Any:
        stamp = pd.Timestamp(value)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
        return stamp.floor("D")

    start, end = day(low), day(high) + pd.Timedelta(days=1)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the commit decision -----------------------------------------------------------------------

@dataclass(frozen=True)
class PublishRequest:
    """What one publication wants to commit; its :attr:`digest` identifies it across runs."""

    app_id: str
    run_id: str
    prediction_table: str
    source_table: str
    source_table_id: str
    mode: PublicationMode
    action: Action
    source_version_from: int | None
    source_version_to: int
    period_start: str | None
    period_end: str | None
    model_name: str
    model_version: int
    artifact_sha256: str
    config_digest: str
    schema: tuple[tuple[str, str], ...]
    rows: int
    recovery: str | None = None

    @property
    def digest(self) -> str:
        """SHA-256 of the request without its run id: the same request, run twice, has one digest."""
        body = {k: v for k, v in asdict(self).items() if k != "run_id"}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Decision:
    """What the writer does against ``read_version`` (the target version it planned against;
    None: no table, the commit creates it as version 0, :func:`first_commit`).

    ``txn_version`` is the app transaction version of the commit: the target version it creates.
    """

    action: Action
    message: str
    read_version: int | None
    schema_mode: Literal["merge", "overwrite"] | None = None
    watermark_before: int | None = None
    watermark_after: int | None = None
    replayed: dict[str, Any] | None = None

    @property
    def txn_version(self) -> int:
        return 0 if self.read_version is None else self.read_version + 1


def _stale(table: str, wm: Watermark, what: str) -> StalePlanError:
    return StalePlanError(
        f"{table} moved on since this run was planned: its last commit (v{wm.table_version}, run "
        f"{wm.run_id}) published the source up to v{wm.source_version}, and {what}. Nothing was "
        "written; score again (lakescore score --publish) to plan from the table as it is now.",
        table=table, watermark=wm.source_version)


def _schema_problem(request: PublishRequest, target: TargetState, migrate: bool) -> str | None:
    held, new = dict(target.schema), dict(request.schema)
    if held == new:
        return None
    if migrate:
        return "overwrite" if request.action == "replace_table" else "merge"
    extra = sorted(set(new) - set(held))
    gone = sorted(set(held) - set(new))
    retyped = sorted(c for c in set(new) & set(held) if new[c] != held[c])
    raise SchemaChangeError(
        f"{target.table} v{target.version} has columns {list(held)}, the predictions of "
        f"{request.model_name} v{request.model_version} have {list(new)} (new: {extra}, missing: {gone}, "
        f"other type: {retyped}). lakescore does not evolve the schema silently: write to a new "
        "prediction_table, or run `lakescore publish --migrate`.",
        table=target.table, new=extra, missing=gone, retyped=retyped)


def _replay(request: PublishRequest, target: TargetState) -> Decision | None:
    for receipt in target.receipts:
        if receipt.get("request_digest") == request.digest:
            return Decision("noop", (f"replay: no-op (run {receipt['run_id']} already published this request "
                                     f"to {target.table} v{receipt['table_version']})"),
                            target.version, replayed=receipt)
        if receipt.get("run_id") == request.run_id:
            raise PublishConflictError(
                f"run {request.run_id} was already published to {target.table} v{receipt['table_version']} "
                f"with a different request (digest {receipt.get('request_digest', '')[:12]}…, this one "
                f"{request.digest[:12]}…). A run id names one request: score again for a new run id.",
                table=target.table, run_id=request.run_id)
    return None


def _against_watermark(request: PublishRequest, target: TargetState,
                       model_change_mode: ModelChangeMode) -> Decision | None:
    """Check a (non-recovery) request against the table's watermark: a no-op when its window is
    already covered, else None; raises when it is stale, unbound or a refused model change."""
    check_receipts_complete(target)
    wm = target.watermark
    if wm is None:
        if target.has_rows:
            raise CdfRecoveryRequiredError(
                f"{target.table} v{target.version} has rows but no lakescore receipt; its watermark is "
                "unknown. Rebuild it: lakescore publish --recover-predictions", table=target.table)
        return None
    _check_binding(wm, target.table, target.table_id, request.source_table, request.source_table_id)
    if _model_changed(wm, request.model_name, request.model_version):
        if model_change_mode == "reject":
            _reject_model_change(target.table, wm, request.model_name, request.model_version)
        if model_change_mode == "full_rebuild" and request.action != "replace_table":
            raise _stale(target.table, wm, f"the model changed to v{request.model_version} since "
                         "(model_change_mode: full_rebuild needs a full rescore)")
    if request.action == "append" and request.source_version_from is not None:
        if request.source_version_to <= wm.source_version:
            return Decision("noop", (f"replay: no-op ({target.table} already holds {request.source_table} up to "
                                     f"v{wm.source_version}, run {wm.run_id})"), target.version,
                            watermark_before=wm.source_version)
        if request.source_version_from != wm.source_version + 1:
            raise _stale(target.table, wm, f"this run read v{request.source_version_from}..v{request.source_version_to}")
    elif request.action == "append":  # a first publication, but the table has one already
        raise _stale(target.table, wm, f"this run planned a first publication of v{request.source_version_to}")
    elif request.source_version_to < wm.source_version:
        raise _stale(target.table, wm, f"this run pinned v{request.source_version_to}")
    return None


def decide(request: PublishRequest, target: TargetState, *, allow_empty: bool = False,
           model_change_mode: ModelChangeMode = "incremental_append", migrate: bool = False) -> Decision:
    """Decide what to do with ``request`` against ``target`` (the snapshot the commit will use).

    Parameters
    ----------
    request : PublishRequest
    target : TargetState
        The prediction table at the version the writer read and will commit against.
    allow_empty : bool, default False
        Commit a request with no rows (its receipt advances the watermark); else a no-op.
    model_change_mode : {"incremental_append", "full_rebuild", "reject"}
    migrate : bool, default False
        ``lakescore publish --migrate``: evolve the table's schema to the predictions'.

    Returns
    -------
    Decision
        ``create`` (the table does not exist yet), ``noop`` (a replay, a window already covered, a
        no-op scope, an empty request) or the request's action against ``target.version``.

    Raises
    ------
    PublishConflictError
        The run id was published with a different request.
    StalePlanError
        The table's watermark moved since the run was scoped.
    CdfRecoveryRequiredError
        The watermark is bound to other table ids, or the table has rows and no receipt.
    PredictionsRewrittenError
        A commit after the newest receipt removed rows (:func:`check_watermark_holds`), unless
        the request replaces the whole table (which is then never a replay).
    ModelChangeError, SchemaChangeError
        A refused model or schema change.
    """
    if not target.exists:
        if request.action == "noop" or request.rows == 0:
            return Decision("noop", f"no-op: no rows to publish and {target.table} does not exist yet", None)
        return Decision("create", f"create {request.prediction_table}", None)
    if request.action != "replace_table":
        check_watermark_holds(target)
    replay = None if rewriting_commit(target) else _replay(request, target)  # a rewritten table is rebuilt
    if replay is not None:
        return replay
    wm = target.watermark
    before = wm.source_version if wm else None
    if request.action == "noop":
        return Decision("noop", "no-op: nothing to publish", target.version, watermark_before=before)
    if request.recovery is None:
        covered = _against_watermark(request, target, model_change_mode)
        if covered is not None:
            return covered
    if request.rows == 0 and not allow_empty:
        return Decision("noop", (f"no-op: {request.source_table} v{request.source_version_to} gave no rows to "
                                 "publish (publication.allow_empty is false)"), target.version,
                        watermark_before=before)
    schema_mode = _schema_problem(request, target, migrate) if request.rows else None
    action = _committed_action(request)
    return Decision(action, f"{_WHERE[action]} {target.table} v{target.version} -> v{target.version + 1}"  # type: ignore[operator]
                    + (f" (schema {schema_mode}d)" if schema_mode else ""), target.version,
                    schema_mode=schema_mode, watermark_before=before, watermark_after=request.source_version_to)  # type: ignore[arg-type]  # _schema_problem returns 'merge', 'overwrite' or None


def first_commit(request: PublishRequest) -> Decision:
    """The decision for a table that does not exist yet, where the writer's commit creates it
    with the rows (Spark Delta): the request's own action, as :func:`decide` decides it against
    the empty table a separate create leaves, but against no version: the commit is the table's
    version 0 and carries app transaction version 0. Its receipt names no table id (the table has
    none before this commit); :func:`merge_receipts` gives it the id of the table whose log holds it.
    Call it where :func:`decide` said ``create``."""
    action = _committed_action(request)
    return Decision(action, f"{_WHERE[action]} {request.prediction_table}: created by this commit (v0)", None,
                    watermark_after=request.source_version_to)


_WHERE = {"append": "append to", "replace_period": "replace a period of", "replace_table": "replace all of"}


def _committed_action(request: PublishRequest) -> Action:
    """What a commit of ``request`` does: its action, but an append for a period with no rows."""
    return "append" if request.action == "replace_period" and request.rows == 0 else request.action


def build_receipt(request: PublishRequest, decision: Decision, target: TargetState,
                  **extra: Any) -> dict[str, Any]:
    """The receipt a commit carries in its ``userMetadata`` (JSON), for ``lakescore receipts``.

    ``extra`` adds run facts: certificate_sha256, decision_threshold (which threshold the model
    applied: ``FittedChain.decision_rule``), rows_in, predicted,
    excluded, batch_compute, env_manager, batch_rows, feature_lookups (``[{table, version}]``
    the run joined, only for a model with feature lookups) and components (a model set's
    ``[{name, model_class, decision_threshold, digest}]``: each component's version inside
    ``model_version``, only for a model set).
    """
    return {
        RECEIPT_MARKER: RECEIPT_FORMAT, "run_id": request.run_id, "request_digest": request.digest,
        "app_id": request.app_id, "txn_version": decision.txn_version, "mode": request.mode,
        "action": decision.action, "source_table": request.source_table,
        "source_table_id": request.source_table_id, "source_version_from": request.source_version_from,
        "source_version_to": request.source_version_to, "target_table": request.prediction_table,
        "target_table_id": target.table_id, "target_read_version": decision.read_version,
        "period_start": request.period_start, "period_end": request.period_end,
        "model_name": request.model_name, "model_version": request.model_version,
        "artifact_sha256": request.artifact_sha256, "config_digest": request.config_digest,
        "watermark_before": decision.watermark_before, "watermark_after": decision.watermark_after,
        "recovery": request.recovery, "schema_mode": decision.schema_mode, **extra,
    }

