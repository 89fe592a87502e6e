"""Before scoring: which source rows a run scores, decided by :func:`lakescore.publish.plan.plan_scope`
on the real tables (local runtime, delta-rs).

``lakescore score`` calls :func:`prepare_scope` after preflight. A CDF window's inserted rows are
read here once; :meth:`PreparedScope.source_runtime` hands them to the scoring routes in place of
the pinned snapshot, so both routes score exactly those rows through ``FittedChain.predict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from lakescore.errors import ConfigError
from lakescore.publish.plan import Scope, app_id_for, check_period_nulls, plan_scope, settle_window
from lakescore.publish.state import period_nulls, read_source, read_target, read_window


class WindowSource:
    """The runtime, with the score source narrowed to a CDF window's inserted rows.

    The scoring routes read the source with ``read_table`` (single node) or ``spark_source``
    (Spark); for ``table`` both return ``rows``. Everything else is the wrapped runtime's.
    """

    def __init__(self, runtime: Any, table: str, rows: pd.DataFrame) -> None:
        self._runtime, self._table, self._rows = runtime, table, rows

    def read_table(self, name: str, *, version: int | None = None, columns: list[str] | None = None) -> pd.DataFrame:
        if name != self._table:
            return self._runtime.read_table(name, version=version, columns=columns)
        return self._rows[list(columns)].copy() if columns else self._rows.copy()

    def spark_source(self, name: str, *, version: int) -> Any:
        if name != self._table:
            return self._runtime.spark_source(name, version=version)
        return self._runtime.spark().createDataFrame(self._rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


@dataclass(frozen=True)
class PreparedScope:
    """A :class:`~lakescore.publish.plan.Scope` and, for a CDF window, its inserted rows."""

    scope: Scope
    rows: pd.DataFrame | None = None

    @property
    def empty(self) -> bool:
        """True when there is nothing to score (a no-op, or a window without inserted rows)."""
        return self.scope.action == "noop" or (self.rows is not None and len(self.rows) == 0)

    def source_runtime(self, runtime: Any, table: str) -> Any:
        """The runtime the scoring routes should read ``table`` from."""
        return runtime if self.rows is None else WindowSource(runtime, table, self.rows)


def prepare_scope(project: Any, runtime: Any, plan: Any, *, recover: bool = False) -> PreparedScope:
    """Plan what a run scores: read target receipts and source metadata, decide, read the window.

    Parameters
    ----------
    project : ProjectConfig
    runtime : LocalRuntime
    plan : ScorePlan
        The preflight plan (pinned ``source_version``, model, keys and input columns).
    recover : bool, default False
        ``--recover-predictions``: rebuild the table from the pinned snapshot.

    Raises
    ------
    ConfigError
        ``publication.period_column`` is not a column of the source.
    NullPeriodError
        A snapshot whose ``publication.period_column`` has null rows
        (:func:`~lakescore.publish.plan.check_period_nulls`): refused before scoring.
    PublishError
        Any refusal of :func:`~lakescore.publish.plan.plan_scope` or
        :func:`~lakescore.publish.plan.settle_window` (recovery required, source changed, model
        change rejected, change feed disabled, stale).
    """
    inf = project.inference
    pub = inf.publication
    if pub.period_column and pub.period_column not in runtime.table_columns(plan.source_table):
        raise ConfigError([f"{project.shown('inference')}: publication.period_column {pub.period_column!r} is not a "
                           f"column of {plan.source_table}; available: "
                           f"{', '.join(sorted(runtime.table_columns(plan.source_table)))}"])
    _, target = read_target(str(runtime.table_path(inf.prediction_table)), inf.prediction_table,
                            app_id=app_id_for(inf.job_name, runtime.target, inf.prediction_table))
    source_table = runtime.delta_table(plan.source_table, version=plan.source_version)
    wm = target.watermark
    window_from = wm.source_version + 1 if wm and pub.mode == "incremental" and not recover else None
    source = read_source(source_table, plan.source_table, version=plan.source_version, window_from=window_from)
    scope = plan_scope(pub, source, target, model_name=plan.model_name, model_version=plan.model_version,
                       recover=recover)
    if pub.mode == "snapshot" and scope.read == "snapshot" and pub.period_column:
        check_period_nulls(plan.source_table, plan.source_version, pub.period_column,
                           period_nulls(source_table, pub.period_column))
    if scope.read != "cdf":
        return PreparedScope(scope)
    columns = list(dict.fromkeys([*plan.record_keys, *plan.input_columns, *([pub.period_column] if pub.period_column else [])]))
    rows, changes = read_window(source_table, plan.source_table, inf.prediction_table,
                                first=scope.source_version_from, last=scope.source_version_to,  # type: ignore[arg-type]
                                columns=columns)
    settled = settle_window(scope, pub, source_table=plan.source_table, inserted=len(rows), changes=changes)
    return PreparedScope(settled, rows if settled.read == "cdf" else None)


def empty_predictions(record_keys: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """A scored frame with no rows (a no-op run): the keys and ``FittedChain.predict``'s columns."""
    frame = pd.DataFrame({k: pd.array([], dtype="Int64") for k in record_keys})
    frame["prediction"] = pd.array([], dtype="Int64")
    frame["probability"] = pd.array([], dtype="Float64")
    frame["scoring_status"] = pd.array([], dtype="string")
    frame["exclusion_reason"] = pd.array([], dtype="string")
    return frame


def attach_period(project: Any, runtime: Any, plan: Any, prepared: PreparedScope, scored: pd.DataFrame) -> pd.DataFrame:
    """Add ``publication.period_column`` (from the rows scored) to the predictions, when set."""
    column = project.inference.publication.period_column
    if not column or column in scored.columns or len(scored) == 0:
        return scored
    keys = list(plan.record_keys)
    source = prepared.rows if prepared.rows is not None else runtime.read_table(
        plan.source_table, version=plan.source_version, columns=[*keys, column])
    source = source[[*keys, column]].astype({k: scored[k].dtype for k in keys})
    return scored.merge(source, on=keys, how="left", validate="one_to_one")
