"""The local runtime's Spark: one ``local[2]`` JVM per process with Delta Lake, and, on request, a
Spark Connect server inside it that a Connect client session talks to.

Serverless jobs and standard-access clusters on Databricks hand a job a Spark Connect session, on
which ``sparkContext``, ``.rdd``, ``_jvm`` and other JVM-only calls fail. Locally the same kind of
session comes from :func:`connect_session`: set ``LAKESCORE_SPARK_CONNECT=1`` (or build
``LocalRuntime(home, connect=True)``) and every Spark step runs through Spark Connect.

How the server is started. pyspark's own ``SparkSession.builder.remote("local[2]")`` starts a
classic session with Spark's ``SparkConnectPlugin`` in this process (builder confs reach it) and
connects to it, but it binds the fixed port 15002 on every interface (a second process on the
machine fails with ``BindException``), and afterwards the classic builder hands out only Connect
sessions. Here the same plugin is started on the classic session of :func:`classic_session`, on a
free loopback port with an authentication token, and :func:`connect_session` connects a
``pyspark.sql.connect`` session to it: the same JVM, confs and Delta jars serve both kinds.

Which API ``pyspark.sql.functions`` (``F.col``, ``pandas_udf``, hence ``mlflow.pyfunc.spark_udf``)
builds for is a process-wide switch, the ``SPARK_CONNECT_MODE_ENABLED`` environment variable
(:data:`CONNECT_MODE_ENV`) that pyspark's remote builder sets; :func:`connect_session` sets it too.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from pathlib import Path
from typing import Any

from lakescore.errors import ConfigError, SparkConnectUnavailableError
from lakescore.runtime.jars import SPARK_DELTA_CONF, delta_jars, spark_environment
from lakescore.runtime.local_logs import spark_log_confs, uses_log_config

CONNECT_ENV = "LAKESCORE_SPARK_CONNECT"  # "1": the local runtime's Spark is a Spark Connect session
CONNECT_MODE_ENV = "SPARK_CONNECT_MODE_ENABLED"  # pyspark's switch: functions build Connect columns
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
MASTER_ENV = "LAKESCORE_SPARK_MASTER"  # the local SparkSession's master, e.g. local[1] (scripts/bench_scale.py)
DEFAULT_MASTER = "local[2]"
_LOCAL_MASTER = re.compile(r"local\[([1-9][0-9]*|\*)\]")

ARROW_BATCH_ROWS = 10000
"""``spark.sql.execution.arrow.maxRecordsPerBatch``: rows per Arrow batch a Python worker receives.
Measured with ``scripts/bench_spark_batches.py`` (docs, Figures): 10,000 (Spark's default) with
``spark_udf_prediction_batch_rows`` 10,000 is within the spread of one cell of the fastest of
10k/50k x 10k/50k, at 336,776 and at 5,000,000 rows, and holds the fewest rows of a wide table in a worker at once. The bundle's
score job cluster sets the same value (``resources/score.job.yml``); serverless cannot."""

DRIVER_JVM_OPTIONS = ("-XX:+IgnoreUnrecognizedVMOptions", "-XX:+UseParallelGC",
                      "-XX:MaxInlineLevel=6", "-XX:InlineSmallCode=1000", "-XX:FreqInlineSize=100")
"""Options of the local driver's JVM (in local mode, the executors' too): the throughput garbage
collector in place of G1, and less inlining by the C2 compiler (HotSpot's defaults: 15 levels,
2,500 and 325 bytes), so that the JIT spends less of the two cores compiling Spark's and Delta
Lake's code; a JVM that lacks one of them starts anyway (``IgnoreUnrecognizedVMOptions``).

A local run is short and the JVM new: on this project's 2-core machine the compiler took about
40 % of the JVM's CPU in the test suite. Measured (docs/figures.md, "Local Spark"): ``lakescore
demo`` in a fresh home, 56-59 s and 97-102 CPU-seconds with HotSpot's defaults, 49 s and 78-80
with these; three Spark-heavy test files in one process, 216-226 CPU-seconds against 183."""

_server: tuple[int, str] | None = None  # (port, token) of this process's Spark Connect server


def connect_requested() -> bool:
    """Whether ``LAKESCORE_SPARK_CONNECT=1`` asks for a Spark Connect session."""
    return os.environ.get(CONNECT_ENV, "") == "1"


def spark_master() -> str:
    """The master of the local SparkSession: ``local[2]`` unless ``LAKESCORE_SPARK_MASTER`` says
    ``local[N]`` (N worker threads) or ``local[*]`` (one per core), e.g. to compare one worker
    thread with two (``scripts/bench_scale.py``).

    Raises
    ------
    ConfigError
        The variable holds anything else (a cluster master is the ``databricks`` runtime's job).
    """
    value = os.environ.get(MASTER_ENV, "").strip() or DEFAULT_MASTER
    if not _LOCAL_MASTER.fullmatch(value):
        raise ConfigError([f"environment variable {MASTER_ENV} must be local[N] (N >= 1 worker threads) or "
                           f"local[*]; got {value!r}. Unset it for the default {DEFAULT_MASTER}."])
    return value


def master_cores(master: str) -> int:
    """Worker threads of a local master: N of ``local[N]``, the machine's CPUs for ``local[*]``."""
    inside = master[len("local["):-1]
    return (os.cpu_count() or 1) if inside == "*" else int(inside)


def session_confs(home: Path, jars: list[Path], *, master: str = DEFAULT_MASTER) -> dict[str, str]:
    """The confs of the local session: Delta Lake's extension and catalog from the cached ``jars``,
    Arrow on in batches of :data:`ARROW_BATCH_ROWS` rows, integer inputs to pandas UDFs as nullable
    Int64, two cores, no UI, the driver JVM's :data:`DRIVER_JVM_OPTIONS`, Spark's own log lines in
    ``<home>/logs/spark.log`` (errors also on the console; :mod:`lakescore.runtime.local_logs`), and
    the session time zone UTC (Databricks' default; otherwise Spark takes the JVM's zone, and a
    naive time, or a ``timestamp_ntz`` compared with a ``timestamp``, would be read in the
    machine's local time).

    ``spark.default.parallelism`` is set to the worker threads of ``master`` (what classic Spark
    uses anyway; Spark's file scan cuts the source per core by it, :mod:`lakescore.scoring.splits`).
    ``spark.sql.sources.parallelPartitionDiscovery.parallelism`` is set to the same: Delta Lake's
    ``VACUUM`` lists a table's files in that many tasks (Spark's default is 10,000, which on two
    local cores turns a vacuum of a small table into half a minute of empty tasks).
    """
    # read by the JVM from its first line: none of Spark's chatter on the console
    log_config = spark_log_confs(home)["spark.driver.extraJavaOptions"]
    return {
        **SPARK_DELTA_CONF,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.default.parallelism": str(master_cores(master)),
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(master_cores(master)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
        "spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype": "true",
        "spark.sql.session.timeZone": "UTC",  # not the JVM's zone: as Databricks, delta-rs and serving read times
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": str(home / "spark-warehouse"),
        "spark.driver.memory": "4g",
        "spark.driver.extraJavaOptions": " ".join([*DRIVER_JVM_OPTIONS, log_config]),
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_confs(port: int, token: str) -> dict[str, str]:
    """Confs that start Spark Connect's server plugin on ``127.0.0.1:port``, clients authenticated
    by ``token``.

    Unlike pyspark's local launcher, this does not turn on ``spark.sql.artifact.isolation.*``:
    with it the classic session's Python workers no longer see ``sparkContext.addPyFile`` files
    (``ModuleNotFoundError``), while Connect's ``addArtifacts`` works either way.
    """
    return {
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.port.maxRetries": "0",  # another port would be one the client does not know
        "spark.connect.authenticate.token": token,
    }


def classic_session(home: Path, *, connect_server: bool = False) -> Any:
    """This process's classic ``local[2]`` (:func:`spark_master`) SparkSession with Delta Lake (created on first call).

    Parameters
    ----------
    home : Path
        The runtime's home: ``<home>/spark-warehouse`` is Spark's warehouse folder.
    connect_server : bool, default False
        Also host a Spark Connect server (:func:`server_confs`) for :func:`connect_session`.
        Only a session created by this call can host it: the plugin starts with the JVM.

    Returns
    -------
    pyspark.sql.SparkSession
        The classic session (``sparkContext`` and all), even where :data:`CONNECT_MODE_ENV` is set.

    Raises
    ------
    DeltaJarsMissingError
        The jars are not cached in this environment (one line naming the command).
    SparkConnectUnavailableError
        ``connect_server`` and a classic session without the server already runs in this process.
    """
    global _server
    jars = delta_jars()
    spark_environment()
    from pyspark.sql import SparkSession  # heavy: only when Spark is used

    master = spark_master()
    confs = session_confs(home, jars, master=master)
    server = _server
    if connect_server and server is None:
        server = (_free_port(), secrets.token_hex(16))
        confs.update(server_confs(*server))
    mode = os.environ.pop(CONNECT_MODE_ENV, None)  # set, the classic builder would hand out a Connect session
    try:
        session = (SparkSession.builder.master(master).appName("lakescore").config(map=confs)  # type: ignore[arg-type]  # str values are among the primitives pyspark's stub wants
                   .getOrCreate())
    finally:
        if mode is not None:
            os.environ[CONNECT_MODE_ENV] = mode
    if connect_server and _server is None:
        if CONNECT_PLUGIN not in session.conf.get("spark.plugins", ""):  # type: ignore[operator]  # conf.get with a default returns a str
            raise SparkConnectUnavailableError(
                "a classic SparkSession without a Spark Connect server already runs in this process, and a "
                "server starts only with a new session; stop it first (spark.stop()) or set "
                f"{CONNECT_ENV}=1 before the first Spark step.")
        _server = server
    if not uses_log_config(session.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")):
        session.sparkContext.setLogLevel("ERROR")  # a session started elsewhere: quiet it (Connect has no sparkContext)
    return session


def connect_session(home: Path) -> Any:
    """A Spark Connect session to this process's local server (started on first call).

    The server runs in the JVM of :func:`classic_session` (``connect_server=True``), so it has the
    same confs and Delta jars; its Python workers run on this interpreter (``PYSPARK_PYTHON``).
    Sets :data:`CONNECT_MODE_ENV` as pyspark's remote builder does, so ``pyspark.sql.functions``
    builds Connect columns from then on in this process.

    Returns
    -------
    pyspark.sql.connect.session.SparkSession

    Raises
    ------
    DeltaJarsMissingError, SparkConnectUnavailableError
        As :func:`classic_session`.
    """
    if _server is None:
        classic_session(home, connect_server=True)
    if _server is None:  # pragma: no cover - classic_session raises first
        raise SparkConnectUnavailableError("the local Spark Connect server did not start")
    port, token = _server
    from pyspark.sql.connect.session import SparkSession as ConnectSession  # grpc: only on this lane

    os.environ[CONNECT_MODE_ENV] = "1"
    return ConnectSession.builder.remote(f"sc://localhost:{port}/;token={token}").getOrCreate()
