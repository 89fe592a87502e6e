"""The embedded ``local`` runtime: the :class:`~lakescore.runtime.base.Runtime` with no workspace.

Local (no workspace, no network): a ``local[2]`` SparkSession with Arrow on and Delta Lake's
extension and catalog (or a Spark Connect session to it: ``LAKESCORE_SPARK_CONNECT=1``); MLflow tracking and registry in SQLite under ``<home>/mlflow.db``; Delta
tables under ``<home>/warehouse/<catalog>/<schema>/<table>``, addressed by three-part names. Both
engines read every table through a Delta reader, never the Parquet files behind a version: Spark
through Delta Lake (jars fetched once by ``scripts/setup.sh`` into the environment, see
:func:`lakescore.runtime.jars.fetch_delta_jars`), the single-node route through ``deltalake`` (delta-rs).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakescore.change_feed_errors import change_feed_error
from lakescore.config import TABLE_NAME
from lakescore.errors import TableExistsError, TableNotFoundError, spark_errors
from lakescore.locking import exclusive
from lakescore.runtime.base import PLACEMENTS, Placement
from lakescore.runtime.local_spark import classic_session, connect_requested, connect_session
from lakescore.runtime.relocation import ARTIFACTS, rebase, recorded_root

if TYPE_CHECKING:  # pandas and pyarrow load where tables are read (the endpoint process reads none)
    import pandas as pd
    import pyarrow as pa

EXPERIMENT = "lakescore"
ROW_GROUP_ROWS = 1 << 16
"""Most rows per Parquet row group in the tables :meth:`LocalRuntime.write_table` writes (delta-rs
writes up to 1,048,576): Spark's scan cuts a file only between row groups, so the demo flights
(336,776 rows, one file) reach the Spark route in 6 row groups, enough for every local core."""

# Reader features that delta-rs 1.6.6 reads with ``DeltaTable.scan`` (DataFusion), checked on tables
# that Spark Delta 4.4 wrote; it refuses typeWidening and vacuumProtocolCheck. Its ``to_pandas``
# (pyarrow datasets) reads only deltalake.table.SUPPORTED_READER_FEATURES, and a column-mapped table
# (reader version 2) it reads as all nulls, so :meth:`LocalRuntime.read_table` scans those.
DELTA_RS_READER_FEATURES = frozenset({"timestampNtz", "variantType", "variantType-preview",
                                      "deletionVectors", "columnMapping", "v2Checkpoint"})


def _reader_features(table: Any) -> frozenset[str]:
    protocol = table.protocol()
    if protocol.min_reader_version == 2:
        return frozenset({"columnMapping"})
    return frozenset(protocol.reader_features or ())




def _check_name(name: str) -> tuple[str, str, str]:
    if not TABLE_NAME.match(name):
        raise TableNotFoundError(
            f"table name {name!r} is not a three-part name catalog.schema.table "
            "(letters, digits and _ only); write it like main.flights.flights"
        )
    catalog, schema, table = name.split(".")
    return catalog, schema, table


@dataclass
class LocalRuntime:
    """The embedded default runtime. ``home`` holds everything it writes.

    ``connect`` (default: ``LAKESCORE_SPARK_CONNECT=1`` in the environment) makes :meth:`spark` a
    Spark Connect session, as serverless jobs and standard-access clusters get on Databricks.
    ``spark_session`` is a session already started to use instead (an application's own, or one a
    test session shares); by default :meth:`spark` starts one when first asked.
    """

    home: Path
    target: str = "dev"
    kind: Literal["local"] = "local"
    connect: bool = field(default_factory=connect_requested)
    spark_session: Any = field(default=None, repr=False)
    _mlflow_ready: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()

    @property
    def placement(self) -> Placement:
        """What the local placement's tables, engines, MLflow and run store are."""
        return PLACEMENTS["local"]

    # --- tables ------------------------------------------------------------------------------

    def table_path(self, name: str) -> Path:
        """Folder of the Delta table ``catalog.schema.table`` under ``<home>/warehouse``."""
        catalog, schema, table = _check_name(name)
        return self.home / "warehouse" / catalog / schema / table

    def table_location(self, name: str) -> str:
        """:meth:`table_path` as text: what the Delta writers open."""
        return str(self.table_path(name))

    def table_ref(self, name: str) -> str:
        """What the Spark Delta writer addresses: the table's folder (path tables, ``save(path)``)."""
        return self.table_location(name)

    def table_exists(self, name: str) -> bool:
        from deltalake import DeltaTable  # delta-rs only where tables are touched

        return DeltaTable.is_deltatable(str(self.table_path(name)))

    def delta_table(self, name: str, *, version: int | None = None) -> Any:
        """The ``deltalake.DeltaTable`` of ``name`` (at ``version`` when given).

        Raises
        ------
        TableNotFoundError
            Naming the table and the folder looked in, with the fix.
        """
        from deltalake import DeltaTable

        if not self.table_exists(name):
            raise TableNotFoundError(
                f"table {name} does not exist (looked in {self.table_path(name)}). Create it first "
                "(for the demo: python scripts/load_demo_data.py) or fix the name in config/.",
                table=name,
            )
        return DeltaTable(str(self.table_path(name)), version=version)

    def table_version(self, name: str) -> int:
        """Current version number of the table."""
        return int(self.delta_table(name).version())

    def table_id(self, name: str) -> str:
        """The table's Delta id (``metaData.id``)."""
        return str(self.delta_table(name).metadata().id)

    def table_columns(self, name: str) -> list[str]:
        """Column names, in table order."""
        return [f.name for f in self.delta_table(name).schema().fields]

    def table_schema(self, name: str, *, version: int | None = None) -> pa.Schema:
        """The Arrow schema (types and nullability) at ``version``."""
        import pyarrow as pa

        return pa.schema(self.delta_table(name, version=version).schema().to_arrow())

    def table_properties(self, name: str, *, version: int | None = None) -> dict[str, str]:
        """Table properties at ``version`` (``delta.enableChangeDataFeed``, ...)."""
        return dict(self.delta_table(name, version=version).metadata().configuration)

    def history_versions(self, name: str, *, version: int, limit: int) -> list[int]:
        """Versions of the newest ``limit`` commits up to ``version`` whose log entries are kept.

        delta-rs lists a version -1 below version 0 for a table loaded at an older version; it is
        no commit and is left out.
        """
        kept = [int(h["version"]) for h in self.delta_table(name, version=version).history(limit=limit)]
        return [v for v in kept if 0 <= v <= version][:limit]

    def row_count(self, name: str, *, version: int | None = None) -> int:
        """Rows of the table at ``version`` (from the log's file statistics where it has them)."""
        return int(self.delta_table(name, version=version).count())

    def null_rows(self, name: str, column: str, *, version: int | None = None) -> int:
        """Rows at ``version`` whose ``column`` is null.

        Reads that one column; files whose statistics show no nulls are skipped by the dataset.
        """
        import pyarrow.dataset as ds  # statistics and one column only

        dataset = self.delta_table(name, version=version).to_pyarrow_dataset()
        return int(dataset.count_rows(filter=ds.field(column).is_null()))

    def empty_frame(self, name: str) -> pd.DataFrame:
        """A frame with the table's columns and dtypes and no rows (reads no data file)."""
        return self.table_schema(name).empty_table().to_pandas()

    def reader_features(self, name: str, *, version: int | None = None) -> frozenset[str]:
        """Delta reader features that table ``name`` (at ``version``) asks of every reader.

        Reader version 2 means ``columnMapping`` (Delta protocol); version 3 lists its features.
        """
        return _reader_features(self.delta_table(name, version=version))

    def unreadable_features(self, name: str, *, version: int | None = None,
                            engine: Literal["delta-rs", "spark"] = "delta-rs") -> frozenset[str]:
        """Reader features of table ``name`` that ``engine`` cannot read (empty: it reads the table).

        Spark reads through Delta Lake (:data:`DELTA_SPARK_PACKAGE`), which reads every feature
        it writes; delta-rs reads :data:`DELTA_RS_READER_FEATURES`.
        """
        if engine == "spark":
            return frozenset()
        return self.reader_features(name, version=version) - DELTA_RS_READER_FEATURES

    def read_table(self, name: str, *, version: int | None = None, columns: list[str] | None = None,
                   filters: list[tuple[str, str, Any]] | None = None) -> pd.DataFrame:
        """Read the snapshot of a table (at a pinned ``version``) into pandas, through delta-rs:
        integer columns as ``Int64`` and boolean ones as ``boolean``
        (:func:`lakescore.frames.nullable_pandas_type`), so a null never rounds an integer above
        2**53 through float64.

        Rows come in file order, except for tables whose reader features pyarrow datasets lack
        (deletion vectors, column mapping, v2 checkpoints): delta-rs's own scan reads those,
        applying them, in no particular row order. Same columns and dtypes either way.

        ``filters`` (``[(column, op, value), ...]``, a conjunction) is applied by pyarrow's
        dataset, skipping files by their statistics, or after the scan for the latter tables.
        """
        import pyarrow as pa
        from deltalake.table import SUPPORTED_READER_FEATURES

        from lakescore.frames import nullable_pandas_type

        table = self.delta_table(name, version=version)
        if _reader_features(table) <= SUPPORTED_READER_FEATURES:
            return table.to_pandas(columns=columns, filters=filters, types_mapper=nullable_pandas_type)
        schema = pa.schema(table.schema().to_arrow())  # the scan streams Arrow; cast back to the table's types
        wanted = pa.schema([schema.field(c) for c in (columns or schema.names)])
        if filters:
            from pyarrow.parquet import filters_to_expression  # the scan takes no filter: apply it after

            data = pa.table(table.scan()).filter(filters_to_expression(filters))
            return data.select(wanted.names).cast(wanted).to_pandas(types_mapper=nullable_pandas_type)
        return pa.table(table.scan(columns=columns)).select(wanted.names).cast(wanted).to_pandas(
            types_mapper=nullable_pandas_type)

    def read_changes(self, name: str, *, first: int, last: int, columns: list[str]) -> pa.Table:
        """Change data feed rows of versions ``first``..``last`` (delta-rs ``load_cdf``): ``columns``,
        ``_change_type`` and ``_commit_version``; text as ``large_string`` like a table read.

        Raises
        ------
        ChangeFeedReadError
            The feed cannot be read back to ``first`` (vacuumed data files, cleaned log): a lost
            window (:func:`lakescore.change_feed_errors.change_feed_error`); its ``reason`` is the
            reader's own line.
        ChangeFeedQueryError
            Any other failure of the read (e.g. a column the table lacks), naming its cause.
        """
        import pyarrow as pa
        from deltalake.exceptions import DeltaError

        table = self.delta_table(name, version=last)
        try:
            data = pa.table(table.load_cdf(starting_version=first, ending_version=last,
                                           columns=[*columns, "_change_type", "_commit_version"]))
        except (DeltaError, pa.ArrowInvalid, OSError) as err:
            raise change_feed_error(name, first, last, err, columns=columns) from err
        fields = [pa.field(f.name, pa.large_string() if pa.types.is_string_view(f.type) else f.type, f.nullable)
                  for f in data.schema]  # text comes back as string_view, which filter/take do not support
        return data.cast(pa.schema(fields))

    def write_table(self, name: str, frame: pd.DataFrame, *, mode: Literal["error", "append"] = "error",
                    **kwargs: Any) -> None:
        """Write ``frame`` as a Delta table (``mode="error"`` refuses to touch an existing one), in
        row groups of at most :data:`ROW_GROUP_ROWS` rows unless ``writer_properties`` says otherwise.

        Raises
        ------
        TableExistsError
            ``mode="error"`` and the table exists (code ``table_exists``).
        """
        from deltalake import WriterProperties, write_deltalake
        from deltalake.exceptions import DeltaError

        kwargs.setdefault("writer_properties", WriterProperties(max_row_group_size=ROW_GROUP_ROWS))
        path = self.table_path(name)
        if mode == "error" and self.table_exists(name):
            raise self._exists(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_deltalake(str(path), frame, mode=mode, **kwargs)
        except DeltaError as err:  # another process created it between the check and the write
            if mode == "error" and "already exists" in str(err):
                raise self._exists(name) from err
            raise

    def insert_new(self, name: str, frame: pd.DataFrame, *, keys: Sequence[str],
                   schema_mode: Literal["merge"] | None = None, **kwargs: Any) -> int:
        """Append the rows of ``frame`` whose ``keys`` table ``name`` lacks, once however many
        writers race (a delta-rs merge-insert on the key, :func:`lakescore.runtime.appends.insert_new`);
        the table is created with them when missing.

        Returns
        -------
        int
            Rows inserted (0: every key was there, maybe put there by a concurrent writer).
        """
        import pyarrow as pa

        from lakescore.runtime.appends import insert_new

        kwargs.setdefault("writer_properties", self._row_groups())
        path = self.table_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        return insert_new(str(path), pa.Table.from_pandas(frame, preserve_index=False), keys=keys,
                          schema_mode=schema_mode, **kwargs)

    def append_once(self, name: str, frame: pd.DataFrame, *, app_id: str, version: int,
                    schema_mode: Literal["merge"] | None = None, **kwargs: Any) -> None:
        """Append ``frame`` to table ``name`` as app transaction ``(app_id, version)``, unless the
        table records that version already; once however many writers race
        (:func:`lakescore.runtime.appends.append_once`)."""
        import pyarrow as pa

        from lakescore.runtime.appends import append_once

        kwargs.setdefault("writer_properties", self._row_groups())
        path = self.table_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        append_once(str(path), pa.Table.from_pandas(frame, preserve_index=False), app_id=app_id, version=version,
                    schema_mode=schema_mode, **kwargs)

    @staticmethod
    def _row_groups() -> Any:
        from deltalake import WriterProperties

        return WriterProperties(max_row_group_size=ROW_GROUP_ROWS)

    def _exists(self, name: str) -> TableExistsError:
        return TableExistsError(
            f"table {name} already exists at {self.table_path(name)}; write_table(mode='error') never "
            "overwrites. Append with mode='append', or pick another table name.", table=name)

    # --- engines -----------------------------------------------------------------------------

    def spark(self) -> Any:
        """The process's shared SparkSession with Delta Lake, Arrow on and stable pandas integer
        dtypes (``local[2]``, or the ``local[N]`` of ``LAKESCORE_SPARK_MASTER``, see
        :func:`lakescore.runtime.local_spark.spark_master`); a Spark Connect session to it when
        :attr:`connect` is set.

        Delta Lake's extension and catalog come from the jars that ``scripts/setup.sh`` cached
        (``spark.jars``): starting the session needs no network. See
        :mod:`lakescore.runtime.local_spark` for how the Connect server is started.

        Raises
        ------
        DeltaJarsMissingError
            The jars are not cached in this environment (one line naming the command).
        SparkConnectUnavailableError
            :attr:`connect`, and a classic session without a Connect server already runs in this process.
        """
        if self.spark_session is None:
            self.spark_session = connect_session(self.home) if self.connect else classic_session(self.home)
        return self.spark_session

    def spark_source(self, name: str, *, version: int) -> Any:
        """A Spark DataFrame of table ``name`` at ``version``, read through Delta Lake.

        Exactly the snapshot: deletion vectors, partitions and column mapping are applied by
        Delta's reader (``versionAsOf``), never by listing Parquet files.

        Raises
        ------
        TableNotFoundError
            The table does not exist (naming the folder and the fix).
        """
        self.delta_table(name, version=version)  # a missing table or version fails here, with its fix
        return (self.spark().read.format("delta").option("versionAsOf", version)
                .load(str(self.table_path(name))))

    def spark_changes(self, name: str, *, first: int, last: int, columns: list[str]) -> Any:
        """The change data feed of table ``name``, versions ``first``..``last``, as a lazy Spark
        DataFrame read through Delta Lake (``readChangeFeed``, by path): ``columns``,
        ``_change_type`` and ``_commit_version``.

        Raises
        ------
        TableNotFoundError
            The table does not exist (naming the folder and the fix).
        ChangeFeedReadError
            Delta refuses the versions (a cleaned log, a feed not enabled there): a lost window
            (:func:`lakescore.change_feed_errors.change_feed_error`).
        ChangeFeedQueryError
            Any other failure of the read (e.g. ``UNRESOLVED_COLUMN``), naming its cause.
        """
        self.delta_table(name)  # a missing table fails here, with its fix
        try:
            return (self.spark().read.format("delta").option("readChangeFeed", "true")
                    .option("startingVersion", first).option("endingVersion", last)
                    .load(str(self.table_path(name))).select(*columns, "_change_type", "_commit_version"))
        except spark_errors() as err:
            raise change_feed_error(name, first, last, err, columns=columns) from err

    def first_use(self, store: str) -> AbstractContextManager[Path]:
        """A lock that serialises the first use of the shared ``store`` across processes.

        ``<home>/locks/<store>.lock`` held with :func:`lakescore.locking.exclusive`: two commands
        started at once on a fresh home create a store (MLflow's database, the demo tables) once,
        the second waiting for the first.
        """
        return exclusive(self.home / "locks" / f"{store}.lock")

    def feature_engineering(self) -> None:
        """None: here lakescore joins the local Delta feature tables itself (pandas, or Spark on the
        Spark route; :mod:`lakescore.workflows.lookups`)."""
        return None

    def mlflow(self) -> Any:
        """The ``mlflow`` module, pointed at SQLite tracking and registry under ``home``.

        The first call in a process creates (or checks) the database and the ``lakescore``
        experiment under the ``mlflow`` first-use lock, so concurrent commands on a fresh home
        do not run MLflow's schema migrations twice at once. On a home that was copied or moved
        it first points MLflow's recorded artifact URIs at this home
        (:mod:`lakescore.runtime.relocation`): the copy reads its own artifacts, never the original's.
        MLflow's own log lines go to ``<home>/logs/mlflow.log``; only its warnings and errors also
        reach the console (:func:`lakescore.runtime.local_logs.route_mlflow_logs`).

        Raises
        ------
        StoreBusyError
            Another process held the lock for more than ten minutes.
        """
        import mlflow  # heavy: only where models are logged or loaded

        from lakescore.runtime.local_logs import route_mlflow_logs

        route_mlflow_logs(self.home)  # MLflow's INFO lines to <home>/logs/mlflow.log, not the console
        uri = f"sqlite:///{self.home / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        if not self._mlflow_ready:
            with self.first_use("mlflow"):
                client = mlflow.MlflowClient()  # its stores migrate a fresh database on first call
                if client.get_experiment_by_name(EXPERIMENT) is None:
                    client.create_experiment(EXPERIMENT, artifact_location=(self.home / ARTIFACTS).as_uri())
                else:  # a copied or moved home: its recorded artifact URIs follow it here
                    self._follow_home()
                client.search_registered_models(max_results=1)  # the registry store, made here too
            self._mlflow_ready = True
        mlflow.set_experiment(EXPERIMENT)
        return mlflow

    def _follow_home(self) -> int:
        """Rewrite MLflow's recorded artifact URIs to this home when the database recorded another
        root (the home was copied or moved; :mod:`lakescore.runtime.relocation`). Returns the values
        rewritten (0 for a home that is where it was made)."""
        db = self.home / "mlflow.db"
        root = recorded_root(db, EXPERIMENT)
        if root is None or root == self.home:
            return 0
        return rebase(db, old=root, new=self.home)

    def phase_store(self) -> Any:
        """Phase claims in SQLite: ``<home>/phases.db`` (:class:`lakescore.runtime.phases.SqlitePhaseStore`)."""
        from lakescore.runtime.phases import SqlitePhaseStore

        return SqlitePhaseStore(self.home / "phases.db")

    def runs_dir(self) -> Path:
        """Folder for scored runs waiting to be published."""
        path = self.home / "runs"
        path.mkdir(parents=True, exist_ok=True)
        return path
