"""Fixtures of the serving tests: two real registered versions (trained once per run, since
training with admission takes ~40 s here) and a fresh copy of their runtime home per module.
Endpoints started with :func:`serving_helpers.launch` are stopped by the fixture that starts them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fixtures.configs import without_feature_lookups
from fixtures.once import SKIPPED, built_once
from serving_helpers import MODEL, REPO, Trained, chain_of

from lakescore.config import load_project
from lakescore.runtime import LocalRuntime


def _train_two_versions(root: Path, flights: pd.DataFrame) -> None:
    """Train v1 (1,200 flights) and v2 (800 other flights, stronger regularisation) of MODEL into
    ``root/.lakescore``, with their config folders ``root/config`` and ``root/config_v2``; v1 is the
    champion."""
    from lakescore.workflows.train import train

    runtime = LocalRuntime(root / ".lakescore")
    runtime.write_table("main.flights.flights", flights.iloc[::60].head(1200).reset_index(drop=True))
    runtime.write_table("main.flights.flights_v2", flights.iloc[31::97].head(800).reset_index(drop=True))
    config = root / "config"
    shutil.copytree(REPO / "config", config)
    without_feature_lookups(config)  # the serving mechanics on the plain model; lookups: test_serving_lookup.py
    config_v2 = root / "config_v2"
    shutil.copytree(config, config_v2)
    training = yaml.safe_load((config_v2 / "training.yml").read_text())
    training["data"]["table"] = "main.flights.flights_v2"
    training["model"]["params"] = {"max_iter": 500, "C": 0.05}
    (config_v2 / "training.yml").write_text(yaml.safe_dump(training))
    assert train(load_project(config), runtime).version == 1
    assert train(load_project(config_v2), runtime).version == 2
    runtime.mlflow().MlflowClient().set_registered_model_alias(MODEL, "champion", "1")


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, demo_tables: dict[str, pd.DataFrame]) -> Trained:
    """The two versions, trained once per run (:func:`fixtures.once.built_once`: each xdist worker
    gets a copy), and the requests to send."""
    flights = demo_tables["main.flights.flights"]
    root = built_once(tmp_path_factory, "serving-models", lambda folder: _train_two_versions(folder, flights))
    late = flights[flights["month"] >= 10]
    picked = pd.concat([late.iloc[::3000].head(24), late[late["dep_time"].isna()].head(3),
                        late[late["dest"] == "HNL"].head(2), late[late["carrier"] == "OO"].head(1)])
    chain = chain_of(LocalRuntime(root / ".lakescore"), 1)
    return Trained(root / ".lakescore", root / "config", picked.reset_index(drop=True), chain.input_columns)


@pytest.fixture(scope="module")
def module_home(trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh copy of the trained runtime home and config folder (the models are shared)."""
    root = tmp_path_factory.mktemp("serving-module")
    shutil.copytree(trained.home, root / ".lakescore", ignore=SKIPPED)
    shutil.copytree(trained.config_dir, root / "config")
    return root / ".lakescore", root / "config"




@pytest.fixture(scope="session")
def candidate_endpoint(trained: Trained, tmp_path_factory: pytest.TempPathFactory, demo_tables):
    """One endpoint (v1, one replica) for the shadow and canary tests; each test chooses its candidate.

    Canary: 50% share, rollback when the candidate fails 20 points worse over at least 6 requests.
    """
    from serving_helpers import launch, ready_replicas

    root = tmp_path_factory.mktemp("serving-candidates")
    shutil.copytree(trained.home, root / ".lakescore", ignore=shutil.ignore_patterns("serving"))
    shutil.copytree(trained.config_dir, root / "config")
    ep = launch(root / ".lakescore", root / "config", endpoint_name="candidates", max_warm_replicas=3,
                canary={"share_percent": 50, "max_failure_rate_gap": 0.2, "min_requests": 6, "window_s": 600},
                shadow={"rtol": 1e-9, "atol": 1e-12})
    try:
        ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        yield ep
    finally:
        ep.stop()


@pytest.fixture(scope="session")
def late_flights(demo_tables) -> pd.DataFrame:
    """150 flights of months 10-12 (every 500th), for shadow comparisons."""
    flights = demo_tables["main.flights.flights"]
    return flights[flights["month"] >= 10].iloc[::500].head(150).reset_index(drop=True)
