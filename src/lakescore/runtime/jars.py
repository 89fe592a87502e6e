"""Delta Lake's Spark jars: the package lakescore pins for the installed pyspark, where they are
cached in this Python environment, and fetching them once (``scripts/setup.sh``, or
``scripts/setup_dbr.sh`` for ``.venv-dbr``) so later sessions need no network."""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from lakescore.errors import DeltaJarsMissingError, SparkVersionUnsupportedError

# Delta Lake 4.4 is built per Spark minor version, Scala 2.13: io.delta:delta-spark_<major.minor>_2.13
# (delta-spark 4.4.1 on PyPI declares pyspark >=4.0.1,<=4.2.0). pyspark 4.2 in requirements.lock
# (Databricks Runtime 19), 4.1 in requirements-dbr.lock (Databricks Runtime 18 LTS).
DELTA_VERSION = "4.4.0"
DELTA_SPARK_VERSIONS = ("4.0", "4.1", "4.2")
SPARK_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # a table's log replayed in one task, not Delta's 50 (nor one per core): on a local table's log a
    # second task costs more than it saves; every idempotent append replays it (docs/figures.md,
    # Publication (Spark))
    "spark.databricks.delta.snapshotPartitions": "1",
}


def delta_spark_package(spark_version: str | None = None) -> str:
    """Maven coordinate of Delta Lake's Spark jar for a Spark version.

    Parameters
    ----------
    spark_version : str, optional
        Spark version such as ``"4.1.0"``; default the installed pyspark's (read from its package
        metadata, without importing pyspark).

    Returns
    -------
    str
        ``io.delta:delta-spark_<major.minor>_2.13:<DELTA_VERSION>``, e.g.
        ``io.delta:delta-spark_4.1_2.13:4.4.0`` for pyspark 4.1.0.

    Raises
    ------
    SparkVersionUnsupportedError
        pyspark is not installed, or its minor version is not one Delta Lake 4.4 is built for
        (:data:`DELTA_SPARK_VERSIONS`).
    """
    if spark_version is None:
        try:
            spark_version = version("pyspark")
        except PackageNotFoundError as err:
            raise SparkVersionUnsupportedError(
                "pyspark is not installed in this Python environment, so Delta Lake's Spark jars cannot be "
                f"chosen: run `{setup_command()}` (installs its lock file).", spark_version=None) from err
    minor = ".".join(spark_version.split(".")[:2])
    if minor not in DELTA_SPARK_VERSIONS:
        raise SparkVersionUnsupportedError(
            f"pyspark {spark_version} has no Delta Lake {DELTA_VERSION} build (Spark "
            f"{', '.join(DELTA_SPARK_VERSIONS)} only): install the pyspark of its lock file "
            f"(`{setup_command()}`).", spark_version=spark_version)
    return f"io.delta:delta-spark_{minor}_2.13:{DELTA_VERSION}"


def __getattr__(name: str) -> Any:
    # DELTA_SPARK_PACKAGE follows the installed pyspark, read when first asked for (PEP 562)
    if name == "DELTA_SPARK_PACKAGE":
        return delta_spark_package()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def setup_command() -> str:
    """The command that installs this Python environment and fetches its jars: ``bash
    scripts/setup_dbr.sh`` inside ``.venv-dbr`` (the Databricks Runtime lane), else ``bash scripts/setup.sh``."""
    return "bash scripts/setup_dbr.sh" if Path(sys.prefix).name == ".venv-dbr" else "bash scripts/setup.sh"


def delta_jars_dir() -> Path:
    """Folder of Delta Lake's Spark jars: ``lakescore-jars`` inside this Python environment."""
    return Path(sys.prefix) / "lakescore-jars"


def delta_jars(folder: Path | None = None) -> list[Path]:
    """The cached jars of :func:`delta_spark_package` (the installed pyspark's) and their dependencies.

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
    package = delta_spark_package()
    manifest = folder / "delta-jars.json"
    fix = f"run `{setup_command()}` once (fetches {package} from Maven Central)"
    if not manifest.is_file():
        raise DeltaJarsMissingError(f"Delta Lake's Spark jars are not in {folder}: {fix}.", folder=str(folder))
    listed = json.loads(manifest.read_text())
    jars = [folder / name for name in listed.get("jars", [])]
    if listed.get("package") != package or not jars or not all(j.is_file() for j in jars):
        raise DeltaJarsMissingError(
            f"Delta Lake's Spark jars in {folder} are for {listed.get('package')!r} or incomplete, "
            f"not {package}: {fix}.", folder=str(folder))
    return jars


def fetch_delta_jars(folder: Path | None = None) -> list[Path]:
    """Fetch :func:`delta_spark_package` once with Spark's own resolver (Ivy, network).

    Resolves the package and its dependencies into ``folder/ivy`` with ``spark.jars.packages``
    (as Delta Lake documents) in a throwaway local session, then writes ``delta-jars.json``
    listing the jars. Later sessions load them with ``spark.jars`` and need no network. Run by
    ``scripts/setup.sh`` and ``scripts/setup_dbr.sh``; does nothing when the jars are already there.

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
    package = delta_spark_package()
    spark_environment()
    from pyspark.sql import SparkSession  # heavy: only at set-up

    session = (SparkSession.builder.master("local[1]").appName("lakescore-fetch-delta-jars")
               .config("spark.jars.packages", package)
               .config("spark.jars.ivy", str(folder / "ivy"))
               .config("spark.ui.enabled", "false").getOrCreate())
    try:
        uris = [u for u in session.sparkContext.getConf().get("spark.jars", "").split(",") if u]
    finally:
        session.stop()
    from urllib.parse import unquote, urlparse

    names = [str(Path(unquote(urlparse(u).path)).relative_to(folder)) for u in uris]
    (folder / "delta-jars.json").write_text(json.dumps({"package": package, "jars": names}, indent=1))
    return delta_jars(folder)


def spark_environment() -> None:
    """Environment a local Spark needs: workers on this interpreter, loopback only."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need the venv
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local[2] never leaves loopback
