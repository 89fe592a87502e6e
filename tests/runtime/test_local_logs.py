"""Spark's and MLflow's own log lines on the local runtime: in ``<home>/logs/``, not on the console,
while lakescore's own warnings (and MLflow's warnings) still reach it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from lakescore.runtime.local_logs import MLFLOW_LOG, SPARK_LOG, route_mlflow_logs, spark_log_confs

# A fresh process: the log4j2 file is read when the JVM starts, and MLflow's handlers are made at import.
CHILD = textwrap.dedent("""
    import logging, sys, warnings
    from pathlib import Path
    from lakescore import progress
    from lakescore.runtime import LocalRuntime

    runtime = LocalRuntime(Path(sys.argv[1]))
    runtime.mlflow()  # a fresh database: MLflow logs "Creating initial MLflow database tables..." (INFO)
    logging.getLogger("mlflow.test").warning("an MLflow warning stays on the console")
    with progress.step("test: count"):
        print("rows", runtime.spark().range(7).count())
    warnings.warn("lakescore's own warning stays on the console", UserWarning)
""")


@pytest.mark.spark
def test_a_local_run_keeps_spark_and_mlflow_lines_off_the_console_and_in_the_log_files(tmp_path):
    home = tmp_path / "home with space"
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(home)], capture_output=True, text=True, timeout=600,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 7" in done.stdout
    console = done.stderr
    for chatter in ("NativeCodeLoader", "log4j", "Setting default log level", "INFO mlflow",
                    "Creating initial MLflow database tables", " WARN "):
        assert chatter not in console, console
    assert "an MLflow warning stays on the console" in console
    assert "lakescore's own warning stays on the console" in console
    assert "lakescore: test: count: done" in console
    spark_log = (home / "logs" / SPARK_LOG).read_text()
    assert "WARN NativeCodeLoader" in spark_log  # Hadoop's first warning: the JVM read the file from its start
    mlflow_log = (home / "logs" / MLFLOW_LOG).read_text()
    assert "INFO mlflow.store.db.utils: Creating initial MLflow database tables" in mlflow_log


def test_the_driver_jvm_is_pointed_at_a_log4j2_file_under_the_home(tmp_path):
    home = tmp_path / "a home"
    [(key, value)] = spark_log_confs(home).items()
    assert key == "spark.driver.extraJavaOptions"
    assert value == f"-Dlog4j2.configurationFile={(home / 'logs' / 'spark-log4j2.properties').as_uri()}"
    assert " " not in value  # one option: extraJavaOptions is split on spaces
    text = (home / "logs" / "spark-log4j2.properties").read_text()
    assert f"appender.file.fileName = {home / 'logs' / SPARK_LOG}" in text
    assert "appender.console.filter.threshold.level = error" in text  # Spark's errors still reach the console


def test_mlflow_info_goes_to_the_file_and_its_warnings_stay_on_the_console(tmp_path, capsys):
    logger = logging.getLogger("mlflow")
    before = list(logger.handlers), logger.level, logger.propagate
    console = logging.StreamHandler(sys.stderr)
    logger.handlers, logger.propagate = [console], False
    logger.setLevel(logging.INFO)
    try:
        route_mlflow_logs(tmp_path / "one")
        path = route_mlflow_logs(tmp_path)  # again, for another home: one file handler, the new one
        logging.getLogger("mlflow.store.db.utils").info("Creating initial MLflow database tables...")
        logging.getLogger("mlflow.pyfunc").warning("model signature missing")
        assert [h.get_name() for h in logger.handlers].count("lakescore-file") == 1
        for handler in logger.handlers:
            handler.flush()
        err = capsys.readouterr().err
        assert "Creating initial MLflow database tables" not in err and "model signature missing" in err
        text = path.read_text()
        assert "INFO mlflow.store.db.utils: Creating initial MLflow database tables..." in text
        assert "WARNING mlflow.pyfunc: model signature missing" in text
        assert not (tmp_path / "one" / "logs" / MLFLOW_LOG).exists()  # delay=True: the replaced handler wrote nothing
    finally:
        for handler in logger.handlers:
            if handler.get_name() == "lakescore-file":
                handler.close()
        logger.handlers, logger.level, logger.propagate = before
