"""Where things live: the embedded ``local`` default, or ``databricks``.

Local (no workspace, no network): a ``local[2]`` SparkSession with Arrow on and Delta Lake's
extension and catalog; MLflow tracking and registry in SQLite under ``<home>/mlflow.db``; Delta
tables under ``<home>/warehouse/<catalog>/<schema>/<table>``, addressed by three-part names. Both
engines read every table through a Delta reader, never the Parquet files behind a version: Spark
through Delta Lake (jars fetched once by ``scripts/setup.sh`` into the environment, see
:func:`fetch_delta_jars`), the single-node route through ``deltalake`` (delta-rs).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from lakescore.config import TABLE_NAME
from lakescore.errors import DeltaJarsMissingError, RuntimeUnsupportedError, TableExistsError, TableNotFoundError
from lakescore.locking import exclusive

EXPERIMENT = "lakescore"

# Delta Lake for Spark 4.2 / Scala 2.13 (pyspark==4.2.0 in requirements.lock; Databricks Runtime 19).
DELTA_SPARK_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
SPARK_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",  # log replay on 2 cores, not Delta's 50 tasks
}
# Reader features that delta-rs 1.6.6 reads with ``DeltaTable.scan`` (DataFusion), checked on tables
# that Spark Delta 4.4 wrote; it refuses typeWidening and vacuumProtocolCheck. Its ``to_pandas``
# (pyarrow datasets) reads only deltalake.table.SUPPORTED_READER_FEATURES, and a column-mapped table
# (reader version 2) it reads as all nulls, so :meth:`LocalRuntime.read_table` scans those.
DELTA_RS_READER_FEATURES = frozenset({"timestampNtz", "variantType", "variantType-preview",
                                      "deletionVectors", "columnMapping", "v2Checkpoint"})


def delta_jars_dir() -> Path:
    """Folder of Delta Lake's Spark jars: ``lakescore-jars`` inside this Python environment."""
    return Path(sys.prefix) / "lakescore-jars"


def delta_jars(folder: Path | None = None) -> list[Path]:
    """The cached jars of :data:`DELTA_SPARK_PACKAGE` and its dependencies.

    Parameters
    ----------
    folder : Path, optional
        Default :func:`delta_jars_dir`.

    Returns
    -------
    list of Path
        Jar files, in the order Spark's resolver listed them.

    Raises
    ------
    DeltaJarsMissingError
        No manifest, one for another Delta version, or a listed jar gone: one line with the
        command that fetches them.
    """
    folder = folder or delta_jars_dir()
    manifest = folder / "delta-jars.json"
    fix = f"run `bash scripts/setup.sh` once (fetches {DELTA_SPARK_PACKAGE} from Maven Central)"
    if not manifest.is_file():
        raise DeltaJarsMissingError(f"Delta Lake's Spark jars are not in {folder}: {fix}.", folder=str(folder))
    listed = json.loads(manifest.read_text())
    jars = [folder / name for name in listed.get("jars", [])]
    if listed.get("package") != DELTA_SPARK_PACKAGE or not jars or not all(j.is_file() for j in jars):
        raise DeltaJarsMissingError(
            f"Delta Lake's Spark jars in {folder} are for {listed.get('package')!r} or incomplete, "
            f"not {DELTA_SPARK_PACKAGE}: {fix}.", folder=str(folder))
    return jars


def fetch_delta_jars(folder: Path | None = None) -> list[Path]:
    """Fetch :data:`DELTA_SPARK_PACKAGE` once with Spark's own resolver (Ivy, network).

    Resolves the package and its dependencies into ``folder/ivy`` with ``spark.jars.packages``
    (as Delta Lake documents) in a throwaway local session, then writes ``delta-jars.json``
    listing the jars. Later sessions load them with ``spark.jars`` and need no network. Run by
    ``scripts/setup.sh``; does nothing when the jars are already there.

    Parameters
    ----------
    folder : Path, optional
        Default :func:`delta_jars_dir`.

    Returns
    -------
    list of Path
        As :func:`delta_jars`.
    """
    folder = folder or delta_jars_dir()
    try:
        return delta_jars(folder)
    except DeltaJarsMissingError:
        pass
    _spark_environment()
    from pyspark.sql import SparkSession  # heavy: only at set-up

    session = (SparkSession.builder.master("local[1]").appName("lakescore-fetch-delta-jars")
               .config("spark.jars.packages", DELTA_SPARK_PACKAGE)
               .config("spark.jars.ivy", str(folder / "ivy"))
               .config("spark.ui.enabled", "false").getOrCreate())
    try:
        uris = [u for u in session.sparkContext.getConf().get("spark.jars", "").split(",") if u]
    finally:
        session.stop()
    from urllib.parse import unquote, urlparse

    names = [str(Path(unquote(urlparse(u).path)).relative_to(folder)) for u in uris]
    (folder / "delta-jars.json").write_text(json.dumps({"package": DELTA_SPARK_PACKAGE, "jars": names}, indent=1))
    return delta_jars(folder)


def _reader_features(table: Any) -> frozenset[str]:
    protocol = table.protocol()
    if protocol.min_reader_version == 2:
        return frozenset({"columnMapping"})
    return frozenset(protocol.reader_features or ())


def _spark_environment() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need the venv
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local[2] never leaves loopback


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
    """The embedded default runtime. ``home`` holds everything it writes."""

    home: Path
    target: str = "dev"
    kind: Literal["local"] = "local"
    _spark: Any = field(default=None, repr=False)
    _mlflow_ready: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()

    # --- tables ------------------------------------------------------------------------------

    def table_path(self, name: str) -> Path:
        """Folder of the Delta table ``catalog.schema.table`` under ``<home>/warehouse``."""
        catalog, schema, table = _check_name(name)
        return self.home / "warehouse" / catalog / schema / table

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

    def table_columns(self, name: str) -> list[str]:
        return [f.name for f in self.delta_table(name).schema().fields]

    def empty_frame(self, name: str) -> pd.DataFrame:
        """A frame with the table's columns and dtypes and no rows (reads no data file)."""
        schema = self.delta_table(name).schema().to_arrow()
        import pyarrow as pa  # schema only: no rows are read

        return pa.schema(schema).empty_table().to_pandas()

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

    def read_table(self, name: str, *, version: int | None = None,
                   columns: list[str] | None = None) -> pd.DataFrame:
        """Read the snapshot of a table (at a pinned ``version``) into pandas, through delta-rs:
        integer columns as ``Int64`` and boolean ones as ``boolean``
        (:func:`lakescore.frames.nullable_pandas_type`), so a null never rounds an integer above
        2**53 through float64.

        Rows come in file order, except for tables whose reader features pyarrow datasets lack
        (deletion vectors, column mapping, v2 checkpoints): delta-rs's own scan reads those,
        applying them, in no particular row order. Same columns and dtypes either way.
        """
        from deltalake.table import SUPPORTED_READER_FEATURES

        from lakescore.frames import nullable_pandas_type

        table = self.delta_table(name, version=version)
        if _reader_features(table) <= SUPPORTED_READER_FEATURES:
            return table.to_pandas(columns=columns, types_mapper=nullable_pandas_type)
        import pyarrow as pa  # the scan streams Arrow batches; cast back to the table's own types

        schema = pa.schema(table.schema().to_arrow())
        wanted = pa.schema([schema.field(c) for c in (columns or schema.names)])
        return pa.table(table.scan(columns=columns)).select(wanted.names).cast(wanted).to_pandas(
            types_mapper=nullable_pandas_type)

    def write_table(self, name: str, frame: pd.DataFrame, *, mode: Literal["error", "append"] = "error",
                    **kwargs: Any) -> None:
        """Write ``frame`` as a Delta table (``mode="error"`` refuses to touch an existing one).

        Raises
        ------
        TableExistsError
            ``mode="error"`` and the table exists (code ``table_exists``).
        """
        from deltalake import write_deltalake
        from deltalake.exceptions import DeltaError

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

    def _exists(self, name: str) -> TableExistsError:
        return TableExistsError(
            f"table {name} already exists at {self.table_path(name)}; write_table(mode='error') never "
            "overwrites. Append with mode='append', or pick another table name.", table=name)

    # --- engines -----------------------------------------------------------------------------

    def spark(self) -> Any:
        """A shared ``local[2]`` SparkSession with Delta Lake, Arrow on and stable pandas integer dtypes.

        Delta Lake's extension and catalog come from the jars that ``scripts/setup.sh`` cached
        (``spark.jars``): starting the session needs no network.

        Raises
        ------
        DeltaJarsMissingError
            The jars are not cached in this environment (one line naming the command).
        """
        if self._spark is None:
            jars = delta_jars()
            _spark_environment()
            from pyspark.sql import SparkSession  # heavy: only when Spark is used

            builder = SparkSession.builder.master("local[2]").appName("lakescore")
            for key, value in SPARK_DELTA_CONF.items():
                builder = builder.config(key, value)
            self._spark = (
                builder.config("spark.jars", ",".join(str(j) for j in jars))
                .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                .config("spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype", "true")
                .config("spark.sql.shuffle.partitions", "4")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.warehouse.dir", str(self.home / "spark-warehouse"))
                .config("spark.driver.memory", "4g")
                .getOrCreate()
            )
            self._spark.sparkContext.setLogLevel("ERROR")
        return self._spark

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

    def first_use(self, store: str) -> AbstractContextManager[Path]:
        """A lock that serialises the first use of the shared ``store`` across processes.

        ``<home>/locks/<store>.lock`` held with :func:`lakescore.locking.exclusive`: two commands
        started at once on a fresh home create a store (MLflow's database, the demo tables) once,
        the second waiting for the first.
        """
        return exclusive(self.home / "locks" / f"{store}.lock")

    def mlflow(self) -> Any:
        """The ``mlflow`` module, pointed at SQLite tracking and registry under ``home``.

        The first call in a process creates (or checks) the database and the ``lakescore``
        experiment under the ``mlflow`` first-use lock, so concurrent commands on a fresh home
        do not run MLflow's schema migrations twice at once.

        Raises
        ------
        StoreBusyError
            Another process held the lock for more than ten minutes.
        """
        import mlflow  # heavy: only where models are logged or loaded

        uri = f"sqlite:///{self.home / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        if not self._mlflow_ready:
            with self.first_use("mlflow"):
                client = mlflow.MlflowClient()  # its stores migrate a fresh database on first call
                if client.get_experiment_by_name(EXPERIMENT) is None:
                    client.create_experiment(EXPERIMENT, artifact_location=(self.home / "mlartifacts").as_uri())
                client.search_registered_models(max_results=1)  # the registry store, made here too
            self._mlflow_ready = True
        mlflow.set_experiment(EXPERIMENT)
        return mlflow

    def runs_dir(self) -> Path:
        """Folder for scored runs waiting to be published."""
        path = self.home / "runs"
        path.mkdir(parents=True, exist_ok=True)
        return path


def get_runtime(kind: str | None = None, *, home: str | Path = ".lakescore", target: str = "dev") -> LocalRuntime:
    """The runtime for ``kind`` (default: ``databricks`` on a cluster, else ``local``).

    Raises
    ------
    RuntimeUnsupportedError
        ``databricks`` asked for off a Databricks cluster.
    """
    on_cluster = "DATABRICKS_RUNTIME_VERSION" in os.environ
    kind = kind or ("databricks" if on_cluster else "local")
    if kind == "databricks":
        raise RuntimeUnsupportedError(
            "runtime 'databricks' is not built yet in this version: run with --runtime local "
            "(the embedded default)."
        )
    return LocalRuntime(Path(home), target=target)
