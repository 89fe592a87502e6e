"""The ``databricks`` runtime: the :class:`~lakescore.runtime.base.Runtime` of a bundle job on a workspace.

- Spark: the job's active session (``SparkSession.getActiveSession()``, else the builder's
  ``getOrCreate()`` with no master), classic or Spark Connect. Only Connect-safe APIs are used:
  Spark SQL, ``spark.read`` / ``DataFrameWriter``, ``spark.catalog.tableExists``; never
  ``sparkContext``, ``_jvm`` or ``.master()``.
- Tables: Unity Catalog three-part names, read and written through Spark SQL on that session
  (``DESCRIBE DETAIL`` / ``DESCRIBE HISTORY``, ``versionAsOf`` and ``readChangeFeed`` by name,
  ``saveAsTable``). Methods that return pandas (:meth:`DatabricksRuntime.read_table`,
  ``empty_frame``) collect to the driver: they serve small tables (quality, labels, a training
  set), never the source or prediction rows of the Spark route.
- Models: MLflow on the workspace (tracking URI ``databricks``) and the Unity Catalog registry
  (``databricks-uc``), in the workspace experiment the bundle names (``--experiment``).
- Feature lookups: through Databricks Feature Engineering (:meth:`DatabricksRuntime.feature_engineering`,
  :mod:`lakescore.runtime.feature_engineering`): ``create_training_set``, ``log_model`` with the
  training set, ``score_batch``; the package is imported only there.
- Run store: staged runs under a Unity Catalog volume (``/Volumes/<catalog>/<schema>/lakescore``,
  a real folder on a cluster through its FUSE mount).

Nothing local-only is reachable from it: no path under ``.lakescore``, no SQLite, no lock file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakescore.change_feed_errors import change_feed_error
from lakescore.config import TABLE_NAME
from lakescore.errors import RuntimeUnsupportedError, TableExistsError, TableNotFoundError
from lakescore.runtime.base import PLACEMENTS, Placement
from lakescore.runtime.local import DELTA_RS_READER_FEATURES
from lakescore.runtime.sql_text import quoted_name

if TYPE_CHECKING:  # pandas and pyarrow load where tables are read (a serving endpoint process reads none)
    import pandas as pd
    import pyarrow as pa

VOLUME = "lakescore"  # the bundle variable ``volume``: /Volumes/<catalog>/<schema>/lakescore
VOLUME_PATH = re.compile(r"^/Volumes/([^/]+)/([^/]+)/([^/]+)(/.*)?$")
# Error classes of a name that does not resolve (Spark, Delta, Unity Catalog).
NOT_FOUND = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND", "CATALOG_NOT_FOUND", "NO_SUCH_CATALOG_EXCEPTION",
             "REQUIRES_SINGLE_PART_NAMESPACE", "DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND")
DENIED = ("PERMISSION_DENIED", "INSUFFICIENT_PERMISSIONS", "UNAUTHORIZED_ACCESS")
# Table features that are reader-writer features (Delta protocol); DESCRIBE DETAIL lists reader
# and writer features together.
READER_FEATURES = frozenset({"columnMapping", "deletionVectors", "timestampNtz", "typeWidening",
                             "typeWidening-preview", "v2Checkpoint", "vacuumProtocolCheck", "variantType",
                             "variantType-preview", "catalogManaged", "catalogOwned-preview"})
FILTER_OPS = {"=": "__eq__", "==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__",
              ">": "__gt__", ">=": "__ge__"}


@dataclass(frozen=True)
class MlflowUris:
    """Where MLflow points: the workspace (``databricks``) and Unity Catalog (``databricks-uc``).

    The one seam tests replace (a SQLite store in a temporary folder); a job never does.
    """

    tracking: str = "databricks"
    registry: str = "databricks-uc"


def volume_home(catalog: str, schema: str, volume: str = VOLUME) -> Path:
    """``/Volumes/<catalog>/<schema>/<volume>``: the runtime's folder on a workspace."""
    return Path("/Volumes") / catalog / schema / volume


def _parts(name: str) -> tuple[str, str, str]:
    if not TABLE_NAME.match(name):
        raise TableNotFoundError(
            f"table name {name!r} is not a three-part name catalog.schema.table (letters, digits and _ "
            "only); Unity Catalog tables are named like main.flights.flights", table=name)
    catalog, schema, table = name.split(".")
    return catalog, schema, table


def _quoted(name: str) -> str:
    return ".".join(map(quoted_name, _parts(name)))


def _not_found(name: str, err: Exception | None = None) -> TableNotFoundError:
    catalog, schema, _ = _parts(name)
    text = str(err or "")
    if any(code in text for code in DENIED):
        why = "this principal may not read it"
    elif "CATALOG" in text or "SINGLE_PART_NAMESPACE" in text:
        why = f"catalog {catalog} does not exist or is not visible"
    elif "SCHEMA_NOT_FOUND" in text:
        why = f"schema {catalog}.{schema} does not exist or is not visible"
    else:
        why = f"no such table in catalog {catalog}, schema {schema}"
    return TableNotFoundError(
        f"table {name} does not resolve ({why}). Create it, or let the job's principal see it: "
        f"GRANT USE CATALOG ON CATALOG {catalog}, USE SCHEMA ON SCHEMA {catalog}.{schema} and SELECT "
        f"(MODIFY to write) ON TABLE {name}; or fix the name (--catalog / --schema, config/).",
        table=name, catalog=catalog, schema=schema)


def _resolves(err: Exception) -> bool:
    """Whether ``err`` says a name does not resolve (or may not be seen)."""
    text = str(err)
    return any(code in text for code in (*NOT_FOUND, *DENIED))


@dataclass
class DatabricksRuntime:
    """The runtime of a bundle job on a Databricks workspace.

    Parameters
    ----------
    home : Path
        Its folder: a Unity Catalog volume path (``/Volumes/<catalog>/<schema>/lakescore``, see
        :func:`volume_home`). Staged runs go to ``<home>/runs``, logs to ``<home>/logs``.
    target : str, default "dev"
        The bundle target (``--target``).
    experiment : str or None
        The MLflow experiment path (``--experiment``; the bundle passes
        ``${workspace.root_path}/lakescore``). None: ``/Workspace/Users/<current_user()>/.bundle/
        lakescore/<target>/lakescore``, the bundle's default root path.
    uris : MlflowUris, default workspace tracking and ``databricks-uc``
    session : pyspark.sql.SparkSession or None
        The session to use; None: the active one.

    Raises
    ------
    RuntimeUnsupportedError
        ``home`` is a relative path or under ``.lakescore`` (local-only).
    """

    home: Path
    target: str = "dev"
    experiment: str | None = None
    uris: MlflowUris = field(default_factory=MlflowUris)
    session: Any = field(default=None, repr=False)
    kind: Literal["databricks"] = "databricks"

    def __post_init__(self) -> None:
        self.home = Path(self.home)
        if not self.home.is_absolute() or ".lakescore" in self.home.parts:
            raise RuntimeUnsupportedError(
                f"runtime 'databricks' keeps its runs on a Unity Catalog volume; got home {str(self.home)!r}, a "
                "local folder. Pass --home /Volumes/<catalog>/<schema>/lakescore (the bundle's jobs do), or "
                "leave it out to use the volume of --catalog / --schema.")

    @property
    def placement(self) -> Placement:
        """What the databricks placement's tables, engines, MLflow and run store are."""
        return PLACEMENTS["databricks"]

    # --- engines -----------------------------------------------------------------------------

    def spark(self) -> Any:
        """The job's SparkSession: the active one, else ``SparkSession.builder.getOrCreate()``
        (no master: the cluster's, or Spark Connect's on serverless)."""
        if self.session is None:
            from pyspark.sql import SparkSession  # heavy: only when Spark is used

            self.session = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        return self.session

    def _frame(self, name: str, version: int | None = None) -> Any:
        """Table ``name`` (at ``version``) as a Spark DataFrame, analysed now so a missing name
        fails here with :func:`_not_found`."""
        reader = self.spark().read if version is None else self.spark().read.option("versionAsOf", version)
        try:
            frame = reader.table(_quoted(name))
            frame.schema  # noqa: B018 -- analyse now (lazy on Spark Connect)
        except Exception as err:  # AnalysisException [TABLE_OR_VIEW_NOT_FOUND], ...
            if _resolves(err):
                raise _not_found(name, err) from err
            raise
        return frame

    def spark_source(self, name: str, *, version: int) -> Any:
        """Table ``name`` at ``version`` as a Spark DataFrame (Delta time travel by name).

        Raises
        ------
        TableNotFoundError
            The name does not resolve (naming the table, its catalog and schema, and the fix).
        """
        return self._frame(name, version)

    # --- tables ------------------------------------------------------------------------------

    def table_exists(self, name: str) -> bool:
        """Whether ``name`` resolves to a table (False also when its catalog or schema does not)."""
        _parts(name)
        try:
            return bool(self.spark().catalog.tableExists(name))
        except Exception as err:  # a missing catalog raises instead of answering False
            if _resolves(err):
                return False
            raise

    def detail(self, name: str) -> dict[str, Any]:
        """``DESCRIBE DETAIL`` of the table: ``id``, ``location``, ``properties``, ``numFiles``, ...

        Raises
        ------
        TableNotFoundError
            The name does not resolve.
        """
        try:
            return self.spark().sql(f"DESCRIBE DETAIL {_quoted(name)}").first().asDict()
        except Exception as err:
            if _resolves(err):
                raise _not_found(name, err) from err
            raise

    def _history(self, name: str) -> Any:
        try:
            history = self.spark().sql(f"DESCRIBE HISTORY {_quoted(name)}")
            history.schema  # noqa: B018 -- analyse now (lazy on Spark Connect)
        except Exception as err:
            if _resolves(err):
                raise _not_found(name, err) from err
            raise
        return history

    def table_location(self, name: str) -> str:
        """The table's storage location from ``DESCRIBE DETAIL`` (``s3://...``, ``abfss://...``).

        Unity Catalog managed tables are written by name, not by this location: give the Delta
        writers :meth:`table_ref`.
        """
        return str(self.detail(name)["location"])

    def table_ref(self, name: str) -> str:
        """What the Spark Delta writer addresses: the three-part name (``saveAsTable``), since
        Unity Catalog managed tables cannot be written by path."""
        _parts(name)
        return name

    def table_version(self, name: str) -> int:
        """The table's current version (the newest in ``DESCRIBE HISTORY``)."""
        return int(self._history(name).selectExpr("max(version) AS v").first()["v"])

    def table_id(self, name: str) -> str:
        """The table's Delta id (``DESCRIBE DETAIL``'s ``id``)."""
        return str(self.detail(name)["id"])

    def table_columns(self, name: str) -> list[str]:
        """Column names, in table order."""
        return list(self._frame(name).columns)

    def table_schema(self, name: str, *, version: int | None = None) -> pa.Schema:
        """The Arrow schema at ``version``, converted from the Spark schema (nullability kept;
        timestamps as UTC microseconds)."""
        from lakescore.frames import spark_arrow_schema

        return spark_arrow_schema(self._frame(name, version).schema)

    def table_properties(self, name: str, *, version: int | None = None) -> dict[str, str]:
        """Table properties at ``version`` (default: current).

        The current ones come from ``DESCRIBE DETAIL``. An older version's are read from the
        table's ``_delta_log`` (:func:`lakescore.runtime.delta_log.table_properties_at`), which
        needs path read access to its location; where Unity Catalog refuses it, the current
        properties stand in (a property such as ``delta.enableChangeDataFeed`` set since the
        version then reads as set).
        """
        detail = self.detail(name)
        if version is None or version >= self.table_version(name):
            return dict(detail["properties"] or {})
        from lakescore.runtime.delta_log import table_properties_at

        try:
            return table_properties_at(self.spark(), str(detail["location"]), version)
        except Exception as err:  # path access refused (managed storage) or the log cleaned below version
            if isinstance(err, LookupError) or _resolves(err) or "LOCATION_OVERLAP" in str(err):
                return dict(detail["properties"] or {})
            raise

    def history_versions(self, name: str, *, version: int, limit: int) -> list[int]:
        """Versions of the newest ``limit`` commits up to ``version`` still in the log, newest first."""
        from pyspark.sql import functions as F  # Spark only here

        rows = (self._history(name).where(F.col("version") <= version).select("version")
                .orderBy(F.col("version").desc()).limit(limit).collect())
        return [int(r["version"]) for r in rows]

    def empty_frame(self, name: str) -> pd.DataFrame:
        """A frame with the table's columns and dtypes and no rows (reads no data file)."""
        return self.table_schema(name).empty_table().to_pandas()

    def reader_features(self, name: str, *, version: int | None = None) -> frozenset[str]:
        """Reader features of the table's current protocol (``DESCRIBE DETAIL``).

        Reader version 2 means ``columnMapping``; version 3 lists features, of which the
        reader-writer ones (:data:`READER_FEATURES`) are kept. ``version`` is accepted for the
        Protocol: the current protocol is a superset of an earlier version's, since Delta only
        upgrades protocols (except ``DROP FEATURE``).
        """
        detail = self.detail(name)
        if int(detail.get("minReaderVersion") or 1) == 2:
            return frozenset({"columnMapping"})
        return frozenset(detail.get("tableFeatures") or ()) & READER_FEATURES

    def unreadable_features(self, name: str, *, version: int | None = None,
                            engine: Literal["delta-rs", "spark"] = "delta-rs") -> frozenset[str]:
        """Reader features ``engine`` cannot read: none for Spark (the workspace's Delta reads
        what it writes); for delta-rs those outside :data:`~lakescore.runtime.local.DELTA_RS_READER_FEATURES`."""
        if engine == "spark":
            return frozenset()
        return self.reader_features(name, version=version) - DELTA_RS_READER_FEATURES

    def row_count(self, name: str, *, version: int | None = None) -> int:
        """Rows at ``version`` (counted on the executors)."""
        return int(self._frame(name, version).count())

    def null_rows(self, name: str, column: str, *, version: int | None = None) -> int:
        """Rows at ``version`` whose ``column`` is null (counted on the executors)."""
        from pyspark.sql import functions as F  # Spark only here

        return int(self._frame(name, version).where(F.col(column).isNull()).count())

    def read_table(self, name: str, *, version: int | None = None, columns: list[str] | None = None,
                   filters: list[tuple[str, str, Any]] | None = None) -> pd.DataFrame:
        """The snapshot at ``version`` into pandas on the driver (small tables only: quality,
        labels, a training set), integers as ``Int64`` and booleans as ``boolean``.

        ``filters`` are ``(column, op, value)`` conjunctions, op one of ``= == != < <= > >= in
        not in``, applied by Spark before anything is collected.
        """
        from pyspark.sql import functions as F  # Spark only here

        from lakescore.frames import nullable_pandas_type

        frame = self._frame(name, version)
        for column, op, value in filters or []:
            if op in ("in", "not in"):
                condition = F.col(column).isin(list(value))
                frame = frame.where(condition if op == "in" else ~condition)
            else:
                frame = frame.where(getattr(F.col(column), FILTER_OPS[op])(F.lit(value)))
        if columns is not None:
            frame = frame.select(*columns)
        return frame.toArrow().to_pandas(types_mapper=nullable_pandas_type)

    def spark_changes(self, name: str, *, first: int, last: int, columns: list[str]) -> Any:
        """The change data feed of ``name``, versions ``first``..``last``, as a lazy Spark DataFrame
        (``readChangeFeed`` by name): ``columns``, ``_change_type`` and ``_commit_version``.

        Raises
        ------
        TableNotFoundError
            The name does not resolve.
        ChangeFeedReadError
            Delta refuses the versions (cleaned log, feed off): a lost window; vacuumed data files
            surface when the frame is computed (:func:`lakescore.publish.state.spark_change_kinds`).
        ChangeFeedQueryError
            Any other failure of the read, naming its cause
            (:func:`lakescore.change_feed_errors.change_feed_error`).
        """
        reader = (self.spark().read.option("readChangeFeed", "true").option("startingVersion", first)
                  .option("endingVersion", last))
        try:
            return reader.table(_quoted(name)).select(*columns, "_change_type", "_commit_version")
        except Exception as err:
            if _resolves(err):
                raise _not_found(name, err) from err
            raise change_feed_error(name, first, last, err, columns=columns) from err

    def read_changes(self, name: str, *, first: int, last: int, columns: list[str]) -> pa.Table:
        """Change data feed rows of versions ``first``..``last`` (:meth:`spark_changes`) on the
        driver: ``columns``, ``_change_type`` and ``_commit_version``; text as ``large_string``.
        For the single-node route, whose windows fit one process.

        Raises
        ------
        TableNotFoundError
            The name does not resolve.
        ChangeFeedReadError
            The feed cannot be read back to ``first`` (vacuumed files, cleaned log, feed off).
        ChangeFeedQueryError
            Any other failure of the read, naming its cause.
        """
        import pyarrow as pa

        frame = self.spark_changes(name, first=first, last=last, columns=columns)
        try:
            data = frame.toArrow()
        except Exception as err:
            raise change_feed_error(name, first, last, err, columns=columns) from err
        fields = [pa.field(f.name, pa.large_string() if pa.types.is_string(f.type) or pa.types.is_string_view(f.type)
                           else f.type, f.nullable) for f in data.schema]
        return data.cast(pa.schema(fields))

    def write_table(self, name: str, frame: pd.DataFrame, *, mode: Literal["error", "append"] = "error",
                    schema_mode: Literal["merge"] | None = None, configuration: dict[str, str] | None = None,
                    **kwargs: Any) -> None:
        """Write ``frame`` to the Unity Catalog table ``name`` (``saveAsTable``).

        Parameters
        ----------
        mode : {"error", "append"}, default "error"
            ``error`` never touches an existing table.
        schema_mode : {"merge"} or None
            ``merge``: new columns are added (``mergeSchema``).
        configuration : dict of str to str, optional
            Table properties of a new table (``delta.enableChangeDataFeed``, ...).
        **kwargs
            Other delta-rs options of the local runtime; refused here.

        Raises
        ------
        TableExistsError
            ``mode="error"`` and the table exists.
        RuntimeUnsupportedError
            An option this runtime does not carry out.
        """
        if kwargs:
            raise RuntimeUnsupportedError(
                f"write_table({name}) got options {sorted(kwargs)} that the databricks runtime does not carry out; "
                "pass only mode, schema_mode and configuration.", table=name)
        if mode == "error" and self.table_exists(name):
            raise TableExistsError(
                f"table {name} already exists; write_table(mode='error') never overwrites. Append with "
                "mode='append', or pick another table name.", table=name)
        writer = self.spark().createDataFrame(frame).write.format("delta").mode(
            "error" if mode == "error" else "append")  # Spark Connect knows "error", not "errorifexists"
        for key, value in (configuration or {}).items():
            writer = writer.option(key, value)
        if schema_mode == "merge":
            writer = writer.option("mergeSchema", "true")
        try:
            writer.saveAsTable(_quoted(name))
        except Exception as err:
            if "TABLE_OR_VIEW_ALREADY_EXISTS" in str(err) and mode == "error":
                raise TableExistsError(f"table {name} was created by another writer meanwhile; nothing written.",
                                       table=name) from err
            if _resolves(err):
                raise _not_found(name, err) from err
            raise

    def insert_new(self, name: str, frame: pd.DataFrame, *, keys: Sequence[str],
                   schema_mode: Literal["merge"] | None = None) -> int:
        """Append the rows of ``frame`` whose ``keys`` the Unity Catalog table ``name`` lacks (a
        Spark ``MERGE ... WHEN NOT MATCHED THEN INSERT``, :func:`lakescore.runtime.appends.spark_insert_new`),
        once however many jobs race; created with them when missing.

        Returns
        -------
        int
            Rows inserted.

        Raises
        ------
        TableNotFoundError
            The catalog or schema does not resolve.
        """
        from lakescore.runtime.appends import spark_insert_new

        try:
            return spark_insert_new(self.spark().createDataFrame(frame), sql=_quoted(name), keys=keys,
                                    save=lambda writer: writer.saveAsTable(_quoted(name)), schema_mode=schema_mode)
        except Exception as err:
            if _resolves(err):
                raise _not_found(name, err) from err
            raise

    def append_once(self, name: str, frame: pd.DataFrame, *, app_id: str, version: int,
                    schema_mode: Literal["merge"] | None = None) -> None:
        """Append ``frame`` to the Unity Catalog table ``name`` as app transaction
        ``(app_id, version)`` (``txnAppId``/``txnVersion``: Delta skips a version it recorded),
        once however many writers race (:func:`lakescore.runtime.appends.spark_append_once`).

        Raises
        ------
        TableNotFoundError
            The catalog or schema does not resolve.
        """
        from lakescore.runtime.appends import spark_append_once

        try:
            spark_append_once(self.spark().createDataFrame(frame), save=lambda writer: writer.saveAsTable(_quoted(name)),
                              app_id=app_id, version=version, schema_mode=schema_mode)
        except Exception as err:
            if _resolves(err):
                raise _not_found(name, err) from err
            raise

    # --- models ------------------------------------------------------------------------------

    def experiment_path(self) -> str:
        """The MLflow experiment: ``experiment``, else the bundle's default root path of
        ``current_user()`` and ``target`` plus ``/lakescore``."""
        if self.experiment:
            return self.experiment
        user = self.spark().sql("SELECT current_user() AS u").first()["u"]
        return f"/Workspace/Users/{user}/.bundle/lakescore/{self.target}/lakescore"

    def mlflow(self) -> Any:
        """The ``mlflow`` module, pointed at the workspace's tracking server and the Unity Catalog
        registry (registered model names are three-part, ``catalog.schema.model``), in
        :meth:`experiment_path` (created by ``set_experiment`` when missing)."""
        import mlflow  # heavy: only where models are logged or loaded

        mlflow.set_tracking_uri(self.uris.tracking)
        mlflow.set_registry_uri(self.uris.registry)
        mlflow.set_experiment(self.experiment_path())
        return mlflow

    def feature_engineering(self) -> Any:
        """The workspace's Feature Engineering seam
        (:class:`~lakescore.runtime.feature_engineering.FeatureEngineering`): models with feature
        lookups train, log and score through ``databricks-feature-engineering`` here. Its package
        is imported only when a call needs it."""
        from lakescore.runtime.feature_engineering import FeatureEngineering

        return FeatureEngineering(self.table_version)

    # --- run store ---------------------------------------------------------------------------

    def runs_dir(self) -> Path:
        """``<home>/runs`` on the volume (a folder through the cluster's FUSE mount).

        Raises
        ------
        RuntimeUnsupportedError
            ``home`` is on a Unity Catalog volume that does not exist (naming the SQL that creates it).
        """
        match = VOLUME_PATH.match(str(self.home))
        if match and not Path("/Volumes", *match.groups()[:3]).is_dir():
            catalog, schema, volume = match.groups()[:3]
            raise RuntimeUnsupportedError(
                f"the run store {self.home} is on volume {catalog}.{schema}.{volume}, which does not exist or is "
                f"not visible. Create it (CREATE VOLUME IF NOT EXISTS {catalog}.{schema}.{volume}) and grant the "
                "job's principal READ VOLUME and WRITE VOLUME on it, or pass another --home.")
        path = self.home / "runs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def phase_store(self) -> Any:
        """Phase claims in the Delta table ``<catalog>.<schema>.lakescore_phases`` of the run store's
        volume (:class:`lakescore.runtime.phases.DeltaPhaseStore`).

        Raises
        ------
        RuntimeUnsupportedError
            ``home`` is not on a Unity Catalog volume (no catalog and schema to hold the table).
        """
        from lakescore.runtime.phases import DeltaPhaseStore

        match = VOLUME_PATH.match(str(self.home))
        if not match:
            raise RuntimeUnsupportedError(f"phase claims live in a Delta table beside the run store's volume; home "
                                          f"{str(self.home)!r} is not /Volumes/<catalog>/<schema>/<volume>. Pass such "
                                          "a --home (the bundle's jobs do)")
        catalog, schema = match.groups()[:2]
        return DeltaPhaseStore(self.spark(), f"{catalog}.{schema}.lakescore_phases")

    def first_use(self, store: str) -> AbstractContextManager[None]:
        """Nothing to hold: on a workspace the shared stores are servers that serialise their own
        first uses. The MLflow tracking server and Unity Catalog create an experiment, a
        registered model or a table once and answer "already exists" to a racing second creator
        (``set_experiment`` and ``saveAsTable`` handle that answer), and a UC volume has no lock
        files that two clusters could share. So this is a no-op context manager."""
        return nullcontext()


def from_environment(*, target: str | None = None, catalog: str | None = None, schema: str | None = None,
                     home: str | Path | None = None, experiment: str | None = None) -> DatabricksRuntime:
    """The :class:`DatabricksRuntime` of a job, from its parameters, else its environment.

    Parameters
    ----------
    target : str, optional
        ``--target``; else ``BUNDLE_TARGET``; else ``dev``.
    catalog, schema : str, optional
        ``--catalog`` / ``--schema`` (default ``main`` / ``flights``): the volume of the default home.
    home : str or Path, optional
        ``--home``; else ``LAKESCORE_HOME``; else :func:`volume_home` of ``catalog`` and ``schema``.
    experiment : str, optional
        ``--experiment``; else ``LAKESCORE_EXPERIMENT``; else the bundle's default path.
    """
    from lakescore.config import DEFAULT_CATALOG, DEFAULT_SCHEMA

    where = home or os.environ.get("LAKESCORE_HOME") or volume_home(catalog or DEFAULT_CATALOG,
                                                                     schema or DEFAULT_SCHEMA)
    return DatabricksRuntime(Path(where), target=target or os.environ.get("BUNDLE_TARGET") or "dev",
                             experiment=experiment or os.environ.get("LAKESCORE_EXPERIMENT") or None)
