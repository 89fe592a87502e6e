"""Where Spark's and MLflow's own log lines go on the local runtime: to files under
``<home>/logs/``, not into the command's summary on the console.

- Spark (the JVM's log4j2): :func:`spark_log_confs` points the driver JVM at a log4j2 properties
  file written by :func:`write_spark_log_config` (``-Dlog4j2.configurationFile`` in
  ``spark.driver.extraJavaOptions``, read when the JVM starts, so even its first lines, such as
  "Using Spark's default log4j profile" and Hadoop's ``NativeCodeLoader`` warning, never reach the
  console). Warnings and errors go to ``<home>/logs/spark.log``; errors also to the console, as
  before.
- MLflow (Python's ``logging``, logger ``mlflow``): :func:`route_mlflow_logs` sends its lines to
  ``<home>/logs/mlflow.log``; its warnings and errors stay on the console too.

lakescore's own lines (progress, warnings, errors) are not touched. On Databricks nothing here
runs: the cluster's logging is the workspace's.
"""

from __future__ import annotations

import logging
from pathlib import Path

SPARK_LOG = "spark.log"
MLFLOW_LOG = "mlflow.log"
LOG4J2_PROPERTIES = "spark-log4j2.properties"
_MLFLOW_LOGGER = "mlflow"
_TO_FILE = "lakescore-file"  # name of the file handler this module adds to MLflow's logger

_LOG4J2 = """\
# Written by lakescore (local runtime): Spark's own log lines go to {log}; errors also to the console.
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console
# as Spark's own defaults: third-party chatter
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.parquet1.name = org.apache.parquet
logger.parquet1.level = error
logger.parquet2.name = parquet
logger.parquet2.level = error
"""


def logs_dir(home: Path) -> Path:
    """``<home>/logs``: the local runtime's log files (created)."""
    folder = Path(home) / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_spark_log_config(home: Path) -> Path:
    """Write the log4j2 properties file of the local JVM (``<home>/logs/spark-log4j2.properties``).

    Parameters
    ----------
    home : Path
        The runtime's home.

    Returns
    -------
    Path
        The properties file; its appenders write ``<home>/logs/spark.log`` (warnings and errors)
        and errors to standard error.
    """
    folder = logs_dir(home)
    path = folder / LOG4J2_PROPERTIES
    text = _LOG4J2.format(log=(folder / SPARK_LOG).resolve().as_posix())
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def spark_log_confs(home: Path) -> dict[str, str]:
    """The Spark conf that makes the driver JVM read :func:`write_spark_log_config`'s file from
    its first line on (local mode: the driver's JVM is the executors' too).

    The file is named by its ``file:`` URI, so a home with spaces needs no quoting inside
    ``spark.driver.extraJavaOptions``.
    """
    uri = write_spark_log_config(home).resolve().as_uri()
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={uri}"}


def uses_log_config(java_options: str | None) -> bool:
    """Whether a session's ``spark.driver.extraJavaOptions`` carry :func:`spark_log_confs`' file."""
    return LOG4J2_PROPERTIES in (java_options or "")


def route_mlflow_logs(home: Path) -> Path:
    """Send MLflow's own log lines (logger ``mlflow``) to ``<home>/logs/mlflow.log``; only its
    warnings and errors stay on the console (its own handler, raised to WARNING).

    Idempotent: a second call (or one for another home) replaces the file handler it added.

    Returns
    -------
    Path
        The log file.
    """
    path = logs_dir(home) / MLFLOW_LOG
    logger = logging.getLogger(_MLFLOW_LOGGER)
    kept = [h for h in logger.handlers if h.get_name() != _TO_FILE]
    for handler in logger.handlers:
        if handler.get_name() == _TO_FILE:
            handler.close()
    for handler in kept:  # MLflow's console handler: warnings and errors only
        handler.setLevel(max(handler.level, logging.WARNING))
    to_file = logging.FileHandler(path, encoding="utf-8", delay=True)
    to_file.set_name(_TO_FILE)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.handlers = [*kept, to_file]
    return path
