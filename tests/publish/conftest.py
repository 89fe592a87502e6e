"""A small real lake for publication tests: a CDF-enabled score source in a temp runtime, a real
fitted chain (no MLflow: the registry plays no part in publishing), and the project config copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from engines import ENGINES  # tests/publish/engines.py
from fixtures.configs import CONFIG

from lakescore.config import ProjectConfig, load_project
from lakescore.publish.run import PublishResult
from lakescore.publish.scope import empty_predictions
from lakescore.rules import load_rules
from lakescore.runtime import LocalRuntime
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.run import ScoredRun
from lakescore.training import ChainRecipe, fit_chain
from lakescore.workflows.publish import publish
from lakescore.workflows.score import finish_run, prepare_scope, source_rows

SOURCE = "main.flights.flights_incoming"
TARGET = "main.flights.late_arrival_predictions"
MODEL = "main.flights.late_arrival"
KEYS = ("flight_id",)
COLUMNS = ["flight_id", "month", "day", "hour", "dep_time", "dep_delay", "distance", "carrier", "time_hour"]


@pytest.fixture(scope="session")
def chain(flights_sample: pd.DataFrame) -> Any:
    """A real FittedChain: IQR outliers, median impute, scale, logistic regression, the
    ``cancelled`` eligibility rule (so some rows are excluded)."""
    config = load_project(CONFIG)
    rows = flights_sample[flights_sample["arr_delay"].notna()]
    numeric = ["month", "day", "hour", "dep_delay", "distance"]
    recipe = [{"step": "IQR", "name": "distance_outlier", "columns": ["distance"], "factor": 1.5},
              {"step": "SimpleImputer", "name": "impute", "columns": numeric, "strategy": "median"},
              {"step": "StandardScaler", "name": "scale", "columns": numeric}]
    return fit_chain(rows, (rows["arr_delay"] > 15).astype("int64"),
                     ChainRecipe(steps=recipe, model_class="LogisticRegression", model_params={"max_iter": 200},
                                 feature_columns=numeric, rules=load_rules(config.scoring)))


class Lake:
    """The score source, the prediction table and a scorer, in one temp runtime."""

    def __init__(self, runtime: LocalRuntime, config_dir: Path, chain: Any, flights: pd.DataFrame) -> None:
        self.runtime, self.config_dir, self.chain = runtime, config_dir, chain
        self.engine = "delta-rs"  # the writer lake.publish uses: "delta-rs" or "spark"
        self.one_pass = False  # with "spark": publish as score --publish does, in one pass from the source
        self.flights = flights[COLUMNS].reset_index(drop=True)
        self.configure()

    def configure(self, **publication: Any) -> ProjectConfig:
        path = self.config_dir / "inference.yml"
        body = yaml.safe_load(path.read_text())
        body["batch_compute"] = "single_node"
        body["publication"] = {**body.get("publication", {}), **publication}
        path.write_text(yaml.safe_dump(body))
        return self.project

    @property
    def project(self) -> ProjectConfig:
        return load_project(self.config_dir)

    @property
    def path(self) -> str:
        return str(self.runtime.table_path(TARGET))

    def v(self, commit: int) -> int:
        """The table version of the ``commit``-th commit of rows (1, 2, ...) into a table the lake's
        writer created: delta-rs creates it empty first (v0: its first rows are v1), a Spark Delta
        commit creates a table addressed by path (the lake's) with its rows (v0)."""
        return commit - 1 if self.engine == "spark" else commit

    def add_source(self, frame: pd.DataFrame) -> int:
        """Append rows to the source (created with change data feed on); returns its new version."""
        from deltalake import write_deltalake

        path = self.runtime.table_path(SOURCE)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_deltalake(str(path), frame.reset_index(drop=True), mode="append",
                        configuration={"delta.enableChangeDataFeed": "true"})
        return self.runtime.table_version(SOURCE)

    def plan(self, model_version: int = 1) -> ScorePlan:
        return ScorePlan(SOURCE, self.runtime.table_version(SOURCE), MODEL, model_version,
                         f"models:/{MODEL}/{model_version}", tuple(self.chain.input_columns), KEYS,
                         f"certificate-{model_version}", f"artifact-{model_version}",
                         decision_threshold=self.chain.decision_rule)

    def score(self, *, model_version: int = 1, recover: bool = False, extra: str | None = None) -> ScoredRun:
        """What the score workflow does (not staged), with the fitted chain in place of the registry's pyfunc."""
        project, plan = self.project, self.plan(model_version)
        prepared = prepare_scope(project, self.runtime, plan, recover=recover)
        if prepared.empty:
            scored = empty_predictions(KEYS)
        else:
            rows = source_rows(self.runtime, plan, prepared, list(dict.fromkeys([*KEYS, *plan.input_columns])))
            scored = pd.concat([rows[list(KEYS)].reset_index(drop=True),
                                self.chain.predict(rows).reset_index(drop=True)], axis=1)
        run = finish_run(project, self.runtime, plan, prepared, scored)
        if extra:
            run.predictions[extra] = pd.array(["x"] * len(run.predictions), dtype="string")
        return run

    def on(self, engine: str, request: pytest.FixtureRequest) -> Lake:
        """Publish with ``engine`` from now on (the Spark one on the test session's SparkSession, or
        on the test's ``route_spark``, classic then Spark Connect, when the test asks for it);
        ``spark-one-pass``: the Spark one, in one pass from the source (``spark_route.one_pass_rows``)."""
        if engine.startswith("spark"):
            self.runtime.spark_session = request.getfixturevalue(
                "route_spark" if "route_spark" in request.fixturenames else "spark")
        self.engine, self.one_pass = ("spark", True) if engine == "spark-one-pass" else (engine, False)
        return self

    def publish(self, run: ScoredRun, *, engine: str | None = None, **kwargs: Any) -> PublishResult:
        """``lakescore publish`` of ``run`` with the lake's writer (or ``engine``); ``pause`` (Spark
        only) is the commit loop's fault hook."""
        if (engine or self.engine) == "spark":
            from spark_route import publish_spark  # tests/publish/spark_route.py

            return publish_spark(self.project, self.runtime, run, **{"one_pass": self.one_pass, **kwargs})
        return publish(self.project, self.runtime, run, **kwargs)

    def maintain(self) -> None:
        """Routine maintenance of the prediction table, with delta-rs: a short log retention,
        OPTIMIZE twice, a checkpoint, log cleanup and VACUUM (which leave no commit of the
        publications in its history)."""
        from deltalake import DeltaTable

        DeltaTable(self.path).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        DeltaTable(self.path).optimize.compact()
        DeltaTable(self.path).optimize.compact()
        DeltaTable(self.path).create_checkpoint()
        DeltaTable(self.path).cleanup_metadata()
        DeltaTable(self.path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)

    def table(self) -> pd.DataFrame:
        return self.runtime.read_table(TARGET)

    def assert_whole(self, expected_keys: pd.Series | None = None) -> pd.DataFrame:
        """Every source row exactly once in the prediction table; returns the table."""
        table = self.table()
        keys = self.runtime.read_table(SOURCE)["flight_id"] if expected_keys is None else expected_keys
        assert table["flight_id"].is_unique, table["flight_id"][table["flight_id"].duplicated()].tolist()[:5]
        assert len(table) == len(keys)
        assert set(table["flight_id"]) == set(keys)
        return table


@pytest.fixture
def lake(runtime: LocalRuntime, project_dir: Path, chain: Any, flights_sample: pd.DataFrame) -> Lake:
    return Lake(runtime, project_dir, chain, flights_sample)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each writer in turn (and the Spark one on the one pass of ``score --publish``): a test
    module overrides ``lake`` with ``lake.on(engine, request)``."""
    return request.param
