"""Facts that Spark SQL does not show, read from a Delta table's ``_delta_log`` with Spark itself.

``DESCRIBE DETAIL`` and ``DESCRIBE HISTORY`` show a table as it is now; two facts lakescore needs
are only in the log's actions: the app transaction of an app id (``txn``, for exactly-once
publication) and the table properties at an older version (``metaData.configuration``, for the
change-feed check of a pinned source). These functions read the log's JSON commits and Parquet
checkpoints as ordinary files with ``spark.read`` (explicit schemas, aggregated on the executors,
one row back), so they work on a classic session and on Spark Connect alike: no
``sparkContext``, no JVM objects.

A third fact is what a commit did to the rows: its ``commitInfo.operation`` and how many of its
``remove`` actions carry ``dataChange=true`` (:func:`commit_facts` for one commit's actions, as
delta-rs readers read them; :func:`later_commit_facts` with Spark). OPTIMIZE rewrites files with
``dataChange=false``; RESTORE, DELETE, UPDATE, MERGE and overwrites remove with ``dataChange=true``.

Limits, stated plainly:

- they need read access to the table's *storage location* (``DESCRIBE DETAIL``'s ``location``).
  Path tables, external tables and a local warehouse allow it; Unity Catalog refuses path access
  to a *managed* table's storage from user code, and then these functions raise the engine's
  error (the caller decides what an unreadable fact means);
- they read every commit file still in the log (Delta keeps 30 days by default) and every
  checkpoint; cheap for a job's table, not meant for a table with millions of commits;
- log compaction files (``<a>.<b>.compacted.json``) count as version ``b``; v2 checkpoints'
  sidecar files hold only ``add``/``remove`` actions and are not read (``txn`` and ``metaData``
  live in the top-level checkpoint file, which is).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TXN_SCHEMA = "txn STRUCT<appId: STRING, version: BIGINT>"
METADATA_SCHEMA = "metaData STRUCT<id: STRING, configuration: MAP<STRING, STRING>>"
COMMIT_SCHEMA = ("commitInfo STRUCT<operation: STRING, operationParameters: MAP<STRING, STRING>>, "
                 "remove STRUCT<path: STRING, dataChange: BOOLEAN>")
COMMIT_FILE = r"^\d{20}\.json$"  # one commit (not a compacted range, not a checkpoint)
# Commit <v>.json, compacted <a>.<b>.compacted.json (counts as b), checkpoint <v>.checkpoint[...].parquet
VERSION_OF_FILE = r"^(\d+)\.(?:(\d+)\.compacted\.json)?"


def _missing(err: Exception) -> bool:
    text = str(err)
    return "PATH_NOT_FOUND" in text or "does not exist" in text


def _actions(spark: Any, location: str, schema: str, *, upto: int) -> list[Any]:
    """Spark DataFrames of the log's commit files and checkpoints at versions ``<= upto``, each
    with the action column of ``schema`` and ``_log_version`` (the file's version); a kind of
    file the log does not hold (no checkpoint yet) is left out."""
    from pyspark.sql import functions as F  # Spark only where a log is read

    log = location.rstrip("/") + "/_delta_log/"
    name = F.col("_metadata.file_name")
    version = F.coalesce(F.nullif(F.regexp_extract(name, VERSION_OF_FILE, 2), F.lit("")),
                         F.regexp_extract(name, VERSION_OF_FILE, 1)).cast("long")
    frames = []
    for read in (lambda: spark.read.schema(schema).json(log + "*.json"),
                 lambda: spark.read.schema(schema).parquet(log + "*.checkpoint*.parquet")):
        try:  # a classic session lists the files here, Spark Connect at the first action (see _first)
            frames.append(read().withColumn("_log_version", version).where(F.col("_log_version") <= upto))  # type: ignore[no-untyped-call]  # the read lambdas above are unannotated
        except Exception as err:  # AnalysisException [PATH_NOT_FOUND]: the glob matched no file
            if not _missing(err):
                raise
    return frames


def _first(frame: Any) -> Any:
    """The frame's first row, or None when its files are not there (no checkpoint yet)."""
    try:
        return frame.first()
    except Exception as err:  # AnalysisException [PATH_NOT_FOUND] on Spark Connect
        if _missing(err):
            return None
        raise


def app_txn_version(spark: Any, location: str, app_id: str, version: int) -> int | None:
    """The app transaction version the Delta table at ``location`` records for ``app_id`` as of
    ``version`` (None: it records none).

    The largest ``txn.version`` of ``app_id`` in the commits and checkpoints up to ``version``:
    the state's value whenever an app's transaction versions only grow, as lakescore's do (each
    is the table version its commit creates). A checkpoint keeps the ``txn`` of commits whose
    files log cleanup removed.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        Classic or Spark Connect.
    location : str
        The table's storage location (``DESCRIBE DETAIL``'s ``location``).
    app_id : str
    version : int
        The table version the answer is pinned to.

    Raises
    ------
    Exception
        The engine's error when the location cannot be read (see the module's limits).
    """
    from pyspark.sql import functions as F  # Spark only where a log is read

    found = []
    for frame in _actions(spark, location, TXN_SCHEMA, upto=version):
        row = _first(frame.where(F.col("txn.appId") == app_id).agg(F.max("txn.version").alias("v")))
        if row is not None and row["v"] is not None:
            found.append(int(row["v"]))
    return max(found) if found else None


def table_properties_at(spark: Any, location: str, version: int) -> dict[str, str]:
    """The table properties (``metaData.configuration``) of the Delta table at ``location`` as of
    ``version``: those of the newest ``metaData`` action in a commit or checkpoint ``<= version``.

    Raises
    ------
    LookupError
        No ``metaData`` at or below ``version`` is left in the log (``version`` is older than the
        oldest kept checkpoint, or the location holds no table).
    Exception
        The engine's error when the location cannot be read (see the module's limits).
    """
    from pyspark.sql import functions as F  # Spark only where a log is read

    best: Any = None
    for frame in _actions(spark, location, METADATA_SCHEMA, upto=version):
        row = _first(frame.where(F.col("metaData.id").isNotNull())
                     .orderBy(F.col("_log_version").desc()).select("_log_version", "metaData.configuration"))
        if row is not None and (best is None or row["_log_version"] > best["_log_version"]):
            best = row
    if best is None:
        raise LookupError(f"no metaData at or below v{version} in {location}/_delta_log")
    return dict(best["configuration"] or {})


def commit_facts(version: int, actions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What one commit did to the rows, from its actions (the parsed lines of ``<version>.json``).

    Returns
    -------
    dict
        ``version``, ``operation`` (``commitInfo.operation``, ``"UNKNOWN"`` without one), ``mode``
        (``operationParameters.mode`` or None) and ``data_removes``: ``remove`` actions whose
        ``dataChange`` is true or missing (the protocol requires it; a missing one is counted).
    """
    operation, mode, removes = "UNKNOWN", None, 0
    for action in actions:
        if isinstance(action.get("commitInfo"), dict):
            info = action["commitInfo"]
            operation = str(info.get("operation") or operation)
            mode = (info.get("operationParameters") or {}).get("mode", mode)
        if isinstance(action.get("remove"), dict) and action["remove"].get("dataChange", True) is not False:
            removes += 1
    return {"version": int(version), "operation": operation, "mode": None if mode is None else str(mode).strip('"'),
            "data_removes": removes}


def later_commit_facts(spark: Any, location: str, after: int, upto: int) -> list[dict[str, Any]]:
    """:func:`commit_facts` of each commit ``after < version <= upto`` still in the log of the
    Delta table at ``location``, oldest first, from one aggregate of the commit files (only one
    row per commit reaches the driver).

    Raises
    ------
    Exception
        The engine's error when the location cannot be read (see the module's limits).
    """
    from pyspark.sql import functions as F  # Spark only where a log is read

    if upto <= after:
        return []
    name = F.col("_metadata.file_name")
    try:
        frame = spark.read.schema(COMMIT_SCHEMA).json(location.rstrip("/") + "/_delta_log/*.json")
        rows = (frame.where(name.rlike(COMMIT_FILE))
                .withColumn("_log_version", F.regexp_extract(name, VERSION_OF_FILE, 1).cast("long"))
                .where((F.col("_log_version") > after) & (F.col("_log_version") <= upto))
                .groupBy("_log_version")
                .agg(F.max("commitInfo.operation").alias("operation"),
                     F.max(F.col("commitInfo.operationParameters").getItem("mode")).alias("mode"),
                     F.sum(F.when(F.col("remove.path").isNotNull()
                                  & F.coalesce(F.col("remove.dataChange"), F.lit(True)), 1).otherwise(0))
                     .alias("data_removes"))
                .orderBy("_log_version").collect())
    except Exception as err:  # AnalysisException [PATH_NOT_FOUND]: no commit file left
        if _missing(err):
            return []
        raise
    return [{"version": int(r["_log_version"]), "operation": r["operation"] or "UNKNOWN",
             "mode": None if r["mode"] is None else str(r["mode"]).strip('"'), "data_removes": int(r["data_removes"])}
            for r in rows]
