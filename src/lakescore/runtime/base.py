"""The one seam between "what" and "where": the :class:`Runtime` Protocol the workflows use, and
the :class:`Placement` table of what differs between the ``local`` and ``databricks`` placements.

A runtime is four small Protocols in one: :class:`Tables` (Delta tables addressed by Unity Catalog
three-part names: facts, reads at a version, the change data feed, writes), :class:`Engines` (the
Spark session and a table as a Spark DataFrame), :class:`Models` (MLflow pointed at this
placement's tracking and registry) and :class:`RunStore` (staged runs and first-use locks). Only
``lakescore.workflows`` holds a whole runtime; a domain function that must read a table takes the
smallest of these Protocols it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from lakescore.config.inference import BatchCompute  # inference.batch_compute: the scoring route

if TYPE_CHECKING:  # annotations only: importing a runtime (the endpoint process does) loads no pandas
    import pandas as pd
    import pyarrow as pa

Kind = Literal["local", "databricks"]
Engine = Literal["delta-rs", "spark"]  # a reader of a table's data files (unreadable_features)
# Where an endpoint listens (lakescore.runtime.serving_address): serving.yml's host, or the driver's address.
ServingBindKind = Literal["configured", "driver"]


class DeltaEngine(StrEnum):
    """The engine that reads and writes a prediction table's Delta log and its receipts
    (ARCHITECTURE.md "Runtimes", row "Delta writes"): chosen by :func:`publication_engine`.

    The values are what ``PublishResult.engine`` reports (``spark-delta`` / ``delta-rs``).
    """

    SPARK_DELTA = "spark-delta"
    DELTA_RS = "delta-rs"


@dataclass(frozen=True)
class Placement:
    """What differs between placements, named in one place (ARCHITECTURE.md "Runtimes").

    Everything above the runtime is the same code in both placements; these are the only
    differences, each as the sentence a user reads.
    """

    kind: Kind
    spark: str
    tables: str
    delta_writes: str
    mlflow: str
    feature_lookup: str
    run_store: str
    publication: tuple[tuple[BatchCompute, DeltaEngine], ...] = ()
    serving: str = ""
    serving_bind: ServingBindKind = "configured"
    endpoint_reads_in_children: bool = True
    """The endpoint process does its registry reads and inference-table appends in children of its
    fork server (locally: MLflow and delta-rs stay out of it); on Databricks they need the job's
    Spark session, so they run in the endpoint process."""

    def publication_engine(self, batch_compute: BatchCompute) -> DeltaEngine:
        """The engine that reads and writes the prediction table of a ``batch_compute`` route here
        (what :attr:`delta_writes` says).

        Raises
        ------
        ValueError
            ``batch_compute`` is not a route of this placement (``spark`` or ``single_node``).
        """
        engines = dict(self.publication)
        if batch_compute not in engines:
            raise ValueError(f"placement {self.kind} has no publication engine for batch_compute {batch_compute!r}; "
                             f"use one of {sorted(engines)}")
        return engines[batch_compute]


PLACEMENTS: dict[str, Placement] = {
    "local": Placement(
        kind="local",
        spark=("local[2] SparkSession with Delta Lake's extension and catalog (jars cached at set-up); "
               "with LAKESCORE_SPARK_CONNECT=1, a Spark Connect session to a server in that JVM"),
        tables="Delta under <home>/warehouse/<catalog>/<schema>/<table>, addressed by three-part names",
        delta_writes=("Spark Delta for the Spark route (from the executors); delta-rs for the single-node "
                      "route and the serving inference table"),
        mlflow="tracking and registry in SQLite under <home>/mlflow.db",
        feature_lookup="a join on the local Delta feature tables",
        run_store="staged runs and locks under <home>",
        publication=(("spark", DeltaEngine.SPARK_DELTA), ("single_node", DeltaEngine.DELTA_RS)),
        serving="the endpoint binds config/serving.yml's host (127.0.0.1): clients on this machine, with the token",
    ),
    "databricks": Placement(
        kind="databricks",
        spark=("the job's active session (classic or Spark Connect; no master set, no sparkContext or JVM "
               "calls)"),
        tables=("Unity Catalog tables by three-part name, through Spark SQL on that session (DESCRIBE "
                "DETAIL/HISTORY, versionAsOf and readChangeFeed by name, saveAsTable)"),
        delta_writes=("Spark Delta by name for both routes (saveAsTable with txnAppId/txnVersion/"
                      "userMetadata); the app transaction read from the _delta_log with Spark where the "
                      "location allows path reads, else unknown"),
        mlflow=("workspace tracking (databricks) and the Unity Catalog registry (databricks-uc, three-part model "
                "names), in the bundle's experiment (--experiment)"),
        feature_lookup=("Databricks Feature Engineering: create_training_set / log_model with the training set "
                        "(Unity Catalog lineage, feature_spec.yaml) / score_batch on the Spark route; each feature "
                        "table's version checked before and after it reads the current one"),
        run_store=("staged runs under the Unity Catalog volume /Volumes/<catalog>/<schema>/lakescore/runs; "
                   "no first-use locks (MLflow and Unity Catalog serialise their own creations)"),
        publication=(("spark", DeltaEngine.SPARK_DELTA), ("single_node", DeltaEngine.SPARK_DELTA)),
        serving=("the endpoint binds the driver's address (spark.driver.host) and requires the token; clients call "
                 "https://<workspace>/driver-proxy-api/o/<org id>/<cluster id>/<port>/; replicas listen on Unix "
                 "sockets behind it"),
        serving_bind="driver",
        endpoint_reads_in_children=False,
    ),
}


@runtime_checkable
class Tables(Protocol):
    """Delta tables by three-part name ``catalog.schema.table``.

    Every method raises :class:`~lakescore.errors.TableNotFoundError` (naming the table and the
    fix) for a table that does not exist, except :meth:`table_exists`.
    """

    def table_exists(self, name: str) -> bool:
        """Whether the table exists."""
        ...

    def table_location(self, name: str) -> str:
        """Where the table's Delta log lives (a folder or a URI), for the Delta writers."""
        ...

    def table_ref(self, name: str) -> str:
        """What the Spark Delta writer (:func:`lakescore.publish.spark_delta.publish`) addresses:
        the location (a path table) or the three-part name (a catalog table, ``saveAsTable``)."""
        ...

    def table_version(self, name: str) -> int:
        """The table's current version."""
        ...

    def table_id(self, name: str) -> str:
        """The table's Delta id (``metaData.id``): it changes when the table is re-created."""
        ...

    def table_columns(self, name: str) -> list[str]:
        """Column names, in table order."""
        ...

    def table_schema(self, name: str, *, version: int | None = None) -> pa.Schema:
        """The Arrow schema (types and nullability) at ``version`` (default: current)."""
        ...

    def table_properties(self, name: str, *, version: int | None = None) -> dict[str, str]:
        """Table properties (``delta.enableChangeDataFeed``, ...) at ``version``."""
        ...

    def history_versions(self, name: str, *, version: int, limit: int) -> list[int]:
        """Versions of the newest ``limit`` commits up to ``version`` still in the log."""
        ...

    def empty_frame(self, name: str) -> pd.DataFrame:
        """A frame with the table's columns and dtypes and no rows."""
        ...

    def reader_features(self, name: str, *, version: int | None = None) -> frozenset[str]:
        """Delta reader features the table asks of every reader."""
        ...

    def unreadable_features(self, name: str, *, version: int | None = None,
                            engine: Engine = "delta-rs") -> frozenset[str]:
        """Reader features ``engine`` cannot read (empty: it reads the table)."""
        ...

    def row_count(self, name: str, *, version: int | None = None) -> int:
        """Rows of the table at ``version``."""
        ...

    def null_rows(self, name: str, column: str, *, version: int | None = None) -> int:
        """Rows at ``version`` whose ``column`` is null (reads that column only)."""
        ...

    def read_table(self, name: str, *, version: int | None = None, columns: list[str] | None = None,
                   filters: list[tuple[str, str, Any]] | None = None) -> pd.DataFrame:
        """The snapshot at ``version`` into pandas, integers as ``Int64`` and booleans as ``boolean``.

        ``filters`` are ``(column, op, value)`` conjunctions (``[("run_id", "=", "abc")]``).
        """
        ...

    def read_changes(self, name: str, *, first: int, last: int, columns: list[str]) -> pa.Table:
        """Change data feed rows of versions ``first``..``last``: ``columns`` plus ``_change_type``
        and ``_commit_version``.

        Raises :class:`~lakescore.errors.ChangeFeedReadError` when the feed cannot be read back
        (vacuumed files, cleaned log), :class:`~lakescore.errors.ChangeFeedQueryError` for any
        other failure of the read (:func:`lakescore.change_feed_errors.change_feed_error`).
        """
        ...

    def write_table(self, name: str, frame: pd.DataFrame, *, mode: Literal["error", "append"] = "error",
                    **kwargs: Any) -> None:
        """Write ``frame`` (``mode="error"`` never touches an existing table)."""
        ...

    def insert_new(self, name: str, frame: pd.DataFrame, *, keys: Sequence[str],
                   schema_mode: Literal["merge"] | None = None) -> int:
        """Append the rows of ``frame`` whose ``keys`` the table lacks (creating it when missing),
        once however many writers race: a Delta merge-insert on the key; rows inserted."""
        ...

    def append_once(self, name: str, frame: pd.DataFrame, *, app_id: str, version: int,
                    schema_mode: Literal["merge"] | None = None) -> None:
        """Append ``frame`` as app transaction ``(app_id, version)`` unless the table records that
        version already, once however many writers race."""
        ...


@runtime_checkable
class Engines(Protocol):
    """The Spark engine of this placement."""

    def spark(self) -> Any:
        """The SparkSession (``pyspark.sql.SparkSession``)."""
        ...

    def spark_source(self, name: str, *, version: int) -> Any:
        """Table ``name`` at ``version`` as a Spark DataFrame, read through Delta Lake."""
        ...

    def spark_changes(self, name: str, *, first: int, last: int, columns: list[str]) -> Any:
        """The change data feed of versions ``first``..``last`` as a Spark DataFrame (Delta's
        ``readChangeFeed`` with ``startingVersion`` / ``endingVersion``): ``columns`` plus
        ``_change_type`` and ``_commit_version``. Lazy: the rows stay on the executors.

        Raises :class:`~lakescore.errors.ChangeFeedReadError` when Delta refuses the versions
        (cleaned log); files vacuumed from under the feed surface when the frame is computed
        (:func:`lakescore.publish.state.spark_change_kinds` raises the same error for them). Any
        other failure of the read is a :class:`~lakescore.errors.ChangeFeedQueryError`, naming its cause.
        """
        ...


@runtime_checkable
class Models(Protocol):
    """MLflow, pointed at this placement's tracking server and registry."""

    def mlflow(self) -> Any:
        """The ``mlflow`` module, ready (experiment and registry created on first use)."""
        ...

    def feature_engineering(self) -> Any:
        """The placement's feature store for models with feature lookups: None where lakescore joins
        the feature tables itself (``local``), else the seam that trains, logs and scores through
        Databricks Feature Engineering (:class:`lakescore.runtime.feature_engineering.FeatureEngineering`)."""
        ...


@runtime_checkable
class RunStore(Protocol):
    """Scored runs waiting for publication, and locks around first uses of shared stores."""

    def runs_dir(self) -> Path:
        """Folder of staged runs (``<run_id>/run.json`` beside ``predictions.parquet``, or a Spark run's
        ``predictions/`` Parquet folder)."""
        ...

    def first_use(self, store: str) -> AbstractContextManager[Any]:
        """A lock that serialises the first use of the shared ``store`` across processes."""
        ...

    def phase_store(self) -> Any:
        """The :class:`lakescore.runtime.phases.PhaseStore` where a job's phases are claimed and
        recorded finished (split training hands search, refit and assemble over through it)."""
        ...


@runtime_checkable
class Runtime(Tables, Engines, Models, RunStore, Protocol):
    """Where a workflow runs: ``kind``, bundle ``target``, ``home`` and the four Protocols.

    ``placement`` names what differs from the other placement (:data:`PLACEMENTS`).
    """

    @property
    def kind(self) -> Kind:
        """``local`` or ``databricks``."""
        ...

    @property
    def target(self) -> str:
        """The bundle target (``dev``, ``staging``, ``prod``): part of the publication identity."""
        ...

    @property
    def home(self) -> Path:
        """This runtime's own folder (serving state, logs, the demo report)."""
        ...

    @property
    def placement(self) -> Placement:
        """What this placement's tables, engines, MLflow and run store are."""
        ...


def publication_engine(runtime: Runtime, batch_compute: BatchCompute) -> DeltaEngine:
    """The engine that reads and writes ``runtime``'s prediction tables for a ``batch_compute``
    route: the one place that decides it (:attr:`Placement.publication`).

    ``databricks``: always Spark Delta (Unity Catalog tables are reached by name; delta-rs has no
    credentials there). ``local``: Spark Delta for ``batch_compute: spark``, delta-rs for
    ``single_node`` (no JVM for a one-process run).

    Parameters
    ----------
    runtime : Runtime
    batch_compute : {"spark", "single_node"}
        ``inference.batch_compute``.

    Returns
    -------
    DeltaEngine
    """
    return runtime.placement.publication_engine(batch_compute)
