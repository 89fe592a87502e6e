"""How the workflows reach a prediction table: through the engine the placement gives the route
(:func:`lakescore.runtime.base.publication_engine`), never through a location chosen here.

- Spark Delta addresses the table by :meth:`~lakescore.runtime.base.Tables.table_ref`: its
  three-part name on Databricks (Unity Catalog managed tables cannot be read by path), its folder
  locally;
- delta-rs opens :meth:`~lakescore.runtime.base.Tables.table_location` (local placement only:
  it has no credentials on a workspace).

:func:`prediction_target` gives ``lakescore score`` (planning), ``lakescore receipts`` and
``lakescore monitor`` one reader of the table's publication state per engine; ``lakescore
publish`` writes with the same engine (:func:`lakescore.workflows.publish.publish`).
"""

from __future__ import annotations

from lakescore.config import BatchCompute
from lakescore.publish.commit import PublicationTarget
from lakescore.runtime import Runtime
from lakescore.runtime.base import DeltaEngine, publication_engine


def prediction_target(runtime: Runtime, table: str, *, batch_compute: BatchCompute,
                      app_id: str | None = None) -> PublicationTarget:
    """The reader of ``table``'s publication state (TargetState and receipts) on the engine the
    placement gives ``batch_compute``.

    Parameters
    ----------
    runtime : Runtime
    table : str
        The prediction table's three-part name.
    batch_compute : {"spark", "single_node"}
        The route whose engine reads it (``inference.batch_compute``).
    app_id : str or None
        The job's app transaction id, read into ``TargetState.app_txn`` (None: not read).

    Returns
    -------
    PublicationTarget
        :class:`~lakescore.publish.spark_delta.SparkDeltaTarget` on ``runtime.table_ref(table)``,
        or :class:`~lakescore.publish.state.DeltaRsTarget` on ``runtime.table_location(table)``.
    """
    if publication_engine(runtime, batch_compute) is DeltaEngine.SPARK_DELTA:
        from lakescore.publish.spark_delta import SparkDeltaTarget  # pyspark: only on this engine

        return SparkDeltaTarget(runtime.table_ref(table), runtime.spark(), table=table, app_id=app_id)
    from lakescore.publish.state import DeltaRsTarget

    return DeltaRsTarget(runtime.table_location(table), table=table, app_id=app_id)
