"""Delta Lake's Spark jars: the package lakescore pins, where they are cached in this Python
environment, and fetching them once (``scripts/setup.sh``) so later sessions need no network."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lakescore.errors import DeltaJarsMissingError

# Delta Lake for Spark 4.2 / Scala 2.13 (pyspark==4.2.0 in requirements.lock; Databricks Runtime 19).
DELTA_SPARK_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
SPARK_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",  # log replay on 2 cores, not Delta's 50 tasks
}


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
    spark_environment()
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


def spark_environment() -> None:
    """Environment a local Spark needs: workers on this interpreter, loopback only."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need the venv
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local[2] never leaves loopback
