"""Delta Lake's Spark jars: the coordinate follows the installed pyspark, each Python environment
caches its own (``.venv`` Spark 4.2, ``.venv-dbr`` Spark 4.1), and a missing cache names the
set-up command of that environment."""

import json
import sys

import pyspark
import pytest

from lakescore.errors import DeltaJarsMissingError, SparkVersionUnsupportedError
from lakescore.runtime import jars
from lakescore.runtime.jars import DELTA_SPARK_PACKAGE, delta_jars, delta_spark_package, setup_command


@pytest.mark.parametrize(("spark_version", "package"), [
    ("4.1.0", "io.delta:delta-spark_4.1_2.13:4.4.0"),  # Databricks Runtime 18 LTS
    ("4.2.0", "io.delta:delta-spark_4.2_2.13:4.4.0"),  # Databricks Runtime 19
    ("4.0.1", "io.delta:delta-spark_4.0_2.13:4.4.0"),
])
def test_the_delta_jar_is_built_for_the_spark_minor_version(spark_version, package):
    assert delta_spark_package(spark_version) == package


def test_a_spark_without_a_delta_build_is_refused_with_the_set_up_command(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    with pytest.raises(SparkVersionUnsupportedError) as err:
        delta_spark_package("4.3.0")
    assert err.value.code == "spark_version_unsupported" and err.value.fields == {"spark_version": "4.3.0"}
    assert str(err.value) == ("pyspark 4.3.0 has no Delta Lake 4.4.0 build (Spark 4.0, 4.1, 4.2 only): install "
                              "the pyspark of its lock file (`bash scripts/setup.sh`).")
    with pytest.raises(SparkVersionUnsupportedError, match="pyspark 3.5.1 has no Delta Lake 4.4.0 build"):
        delta_spark_package("3.5.1")


def test_the_package_follows_the_installed_pyspark():
    minor = ".".join(pyspark.__version__.split(".")[:2])
    assert DELTA_SPARK_PACKAGE == delta_spark_package() == f"io.delta:delta-spark_{minor}_2.13:4.4.0"
    with pytest.raises(AttributeError, match="has no attribute 'DELTA_SPARK_JAR'"):
        jars.DELTA_SPARK_JAR  # noqa: B018


def test_each_environment_names_its_own_set_up_command(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    assert setup_command() == "bash scripts/setup.sh"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv-dbr"))
    assert setup_command() == "bash scripts/setup_dbr.sh"
    with pytest.raises(DeltaJarsMissingError) as err:
        delta_jars()  # .venv-dbr/lakescore-jars, not fetched
    assert str(err.value) == (f"Delta Lake's Spark jars are not in {tmp_path / '.venv-dbr' / 'lakescore-jars'}: run "
                              f"`bash scripts/setup_dbr.sh` once (fetches {DELTA_SPARK_PACKAGE} from Maven Central).")


def test_missing_delta_jars_say_in_one_line_which_command_fetches_them(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    with pytest.raises(DeltaJarsMissingError) as err:
        delta_jars(tmp_path / "lakescore-jars")
    assert err.value.code == "delta_jars_missing"
    assert str(err.value) == (f"Delta Lake's Spark jars are not in {tmp_path / 'lakescore-jars'}: run `bash "
                              f"scripts/setup.sh` once (fetches {DELTA_SPARK_PACKAGE} from Maven Central).")


def test_jars_of_another_delta_version_or_a_deleted_jar_are_refused(tmp_path):
    (tmp_path / "a.jar").write_bytes(b"jar")
    (tmp_path / "delta-jars.json").write_text(json.dumps({"package": "io.delta:delta-spark_4.0_2.13:4.3.0",
                                                          "jars": ["a.jar"]}))
    with pytest.raises(DeltaJarsMissingError, match="are for 'io.delta:delta-spark_4.0_2.13:4.3.0' or incomplete"):
        delta_jars(tmp_path)
    (tmp_path / "delta-jars.json").write_text(json.dumps({"package": DELTA_SPARK_PACKAGE, "jars": ["a.jar", "b.jar"]}))
    with pytest.raises(DeltaJarsMissingError, match="once \\(fetches"):
        delta_jars(tmp_path)
    (tmp_path / "b.jar").write_bytes(b"jar")
    assert delta_jars(tmp_path) == [tmp_path / "a.jar", tmp_path / "b.jar"]


def test_set_up_cached_the_delta_jars_of_this_pyspark_in_this_environment():
    minor = ".".join(pyspark.__version__.split(".")[:2])
    names = [jar.name for jar in delta_jars()]
    assert f"io.delta_delta-spark_{minor}_2.13-4.4.0.jar" in names and "io.delta_delta-storage-4.4.0.jar" in names
    assert all(jar.is_relative_to(sys.prefix) for jar in delta_jars())  # this environment's own cache
