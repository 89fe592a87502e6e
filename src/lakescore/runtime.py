"""Where things live: the embedded ``local`` default, or ``databricks``.

Local (no workspace, no network): a ``local[2]`` SparkSession with Arrow on; MLflow tracking and
registry in SQLite under ``<home>/mlflow.db``; Delta tables through ``deltalake`` under
``<home>/warehouse/<catalog>/<schema>/<table>``, addressed by three-part names. Spark cannot read
Delta here (its jars come from Maven), so the local Spark route reads the Parquet files of the
pinned table version, which is exactly the snapshot Delta describes.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from lakescore.config import TABLE_NAME
from lakescore.errors import RuntimeUnsupportedError, TableNotFoundError

EXPERIMENT = "lakescore"


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

    def read_table(self, name: str, *, version: int | None = None,
                   columns: list[str] | None = None) -> pd.DataFrame:
        """Read a table (at a pinned ``version``) into pandas: integer columns as ``Int64`` and
        boolean ones as ``boolean`` (:func:`lakescore.frames.nullable_pandas_type`), so a null
        never rounds an integer above 2**53 through float64."""
        from lakescore.frames import nullable_pandas_type

        return self.delta_table(name, version=version).to_pandas(columns=columns, types_mapper=nullable_pandas_type)

    def write_table(self, name: str, frame: pd.DataFrame, *, mode: Literal["error", "append"] = "error",
                    **kwargs: Any) -> None:
        """Write ``frame`` as a Delta table (``mode="error"`` refuses to touch an existing one)."""
        from deltalake import write_deltalake

        path = self.table_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_deltalake(str(path), frame, mode=mode, **kwargs)

    # --- engines -----------------------------------------------------------------------------

    def spark(self) -> Any:
        """A shared ``local[2]`` SparkSession with Arrow on and stable pandas integer dtypes."""
        if self._spark is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need the venv
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local[2] never leaves loopback
            from pyspark.sql import SparkSession  # heavy: only when Spark is used

            self._spark = (
                SparkSession.builder.master("local[2]").appName("lakescore")
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
        """A Spark DataFrame of table ``name`` at ``version`` (its Parquet files, read by Spark)."""
        table = self.delta_table(name, version=version)
        if table.metadata().partition_columns:
            raise RuntimeUnsupportedError(
                f"table {name} is partitioned; the local Spark route reads unpartitioned tables "
                "only. Use batch_compute: single_node locally, or run on Databricks."
            )
        return self.spark().read.parquet(*table.file_uris())

    def mlflow(self) -> Any:
        """The ``mlflow`` module, pointed at SQLite tracking and registry under ``home``."""
        import mlflow  # heavy: only where models are logged or loaded

        self.home.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{self.home / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        if mlflow.get_experiment_by_name(EXPERIMENT) is None:
            mlflow.create_experiment(EXPERIMENT, artifact_location=(self.home / "mlartifacts").as_uri())
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
