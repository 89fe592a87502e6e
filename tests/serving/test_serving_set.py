"""A model set on a warm endpoint: planned, served (every output column), recorded and drift-checked;
a shadow of another set version compares every set column; a canary of it routes whole-set requests
and is rolled back when its replica fails. Two set versions: the session's ``trained_set`` (v1) and one
trained here on fewer months with a stronger delay_model regularisation (v2)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from fixtures.once import SKIPPED
from serving_helpers import MODEL, expected_rows, launch, ready_replicas, records

from lakescore.model_set import ModelSet
from lakescore.runtime import LocalRuntime
from lakescore.saved_models import load_saved

pytestmark = pytest.mark.long

RTOL, ATOL = 1e-9, 1e-12
INFERENCE = "main.flights.late_arrival_inference"


@dataclass(frozen=True)
class SetVersions:
    home: Path
    config_dir: Path
    v1: ModelSet
    v2: ModelSet


def set_of(runtime: LocalRuntime, version: int) -> ModelSet:
    """The saved model set of a version, read straight from its artifacts (no pyfunc, no server)."""
    local = runtime.mlflow().artifacts.download_artifacts(f"models:/{MODEL}/{version}/artifacts/chain")
    model = load_saved(local)
    assert isinstance(model, ModelSet)
    return model


@pytest.fixture(scope="module")
def set_versions(trained_set, tmp_path_factory: pytest.TempPathFactory) -> SetVersions:
    from lakescore.config import load_project
    from lakescore.workflows.train import train

    config, runtime, result = trained_set
    assert result.version == 1
    root = tmp_path_factory.mktemp("serving-set")
    shutil.copytree(runtime.home, root / ".lakescore", ignore=SKIPPED)
    shutil.copytree(config, root / "config_v2")
    training = yaml.safe_load((root / "config_v2" / "training.yml").read_text())
    training["data"]["filter"] = "month <= 6 and arr_delay.notna()"
    training["model_set"]["components"]["delay_model"]["model"]["params"] = {"max_iter": 300, "C": 0.05}
    (root / "config_v2" / "training.yml").write_text(yaml.safe_dump(training, sort_keys=False))
    home = LocalRuntime(root / ".lakescore")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")  # the local store's notices
        assert train(load_project(root / "config_v2"), home).version == 2
    home.mlflow().MlflowClient().set_registered_model_alias(MODEL, "champion", "1")
    shutil.copytree(config, root / "config")
    return SetVersions(root / ".lakescore", root / "config", set_of(home, 1), set_of(home, 2))


@pytest.fixture(scope="module")
def set_endpoint(set_versions: SetVersions):
    """The endpoint serving set v1 (champion), one replica; canary 50%, rollback at a 20-point gap over 6 requests."""
    ep = launch(set_versions.home, set_versions.config_dir, endpoint_name="sets", max_warm_replicas=3,
                canary={"share_percent": 50, "max_failure_rate_gap": 0.2, "min_requests": 6, "window_s": 600},
                shadow={"rtol": RTOL, "atol": ATOL})
    try:
        ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        yield ep
    finally:
        ep.stop()


@pytest.fixture(scope="module")
def set_requests(demo_tables) -> pd.DataFrame:
    """120 flights of months 10-12, a cancelled one (ineligible) and a Honolulu one (distance outlier) first."""
    flights = demo_tables["main.flights.flights"]
    late = flights[flights["month"] >= 10]
    return pd.concat([late[late["dep_time"].isna()].head(1), late[late["dest"] == "HNL"].head(1),
                      late.iloc[::600].head(118)]).reset_index(drop=True)


def close(a: Any, b: Any) -> bool:
    """Same label, or both numbers within the shadow's tolerance of b (None only with None)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=ATOL + RTOL * abs(float(b)))
    return a == b


def assert_set_answers(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        for column, value in w.items():
            assert close(g[column], value), (i, column, g[column], value)


def test_a_set_version_is_planned_served_recorded_and_drift_checked(set_endpoint, set_versions: SetVersions,
                                                                    set_requests: pd.DataFrame) -> None:
    ep, v1 = set_endpoint, set_versions.v1
    status = ep.status()
    assert status["version"] == 1 and status["model"] == f"models:/{MODEL}/1"
    rows = set_requests.head(20)
    reply = ep.score(records(rows, v1.input_columns))
    assert reply.status_code == 200, reply.text
    got = reply.json()["predictions"]
    want = expected_rows(v1, rows)
    assert set(want[0]) == {"delay_model_prediction", "delay_model_probability", "minutes_model_prediction",
                            "late_risk", "scoring_status", "exclusion_reason", "late_flag"}
    assert_set_answers(got, want)
    assert [r["exclusion_reason"] for r in got[:2]] == ["ineligible:cancelled", "outlier:delay_model/distance_outlier"]
    assert got[1]["delay_model_prediction"] is None and got[1]["minutes_model_prediction"] is None

    far = records(rows.iloc[[2]], v1.input_columns)[0] | {"distance": 10**6}
    drifted = ep.score([far]).json()["request_id"]
    assert ep.client.post("/flush").status_code == 200
    table = LocalRuntime(ep.home).read_table(INFERENCE)
    first = table[table["request_id"] == reply.json()["request_id"]].sort_values("row_index")
    assert first["prediction"].isna().all() and first["probability"].isna().all()
    assert first["scoring_status"].tolist() == [w["scoring_status"] for w in want]
    recorded = [json.loads(text) for text in first["outputs"]]
    assert_set_answers(recorded, [{k: v for k, v in w.items() if k not in ("scoring_status", "exclusion_reason")}
                                  for w in want])
    assert table.loc[table["request_id"] == drifted, "drift_check"].tolist() == ["out_of_range:distance"]


def test_a_shadow_of_a_set_compares_every_set_column(set_endpoint, set_versions: SetVersions,
                                                     set_requests: pd.DataFrame) -> None:
    ep, v1, v2 = set_endpoint, set_versions.v1, set_versions.v2
    chosen = ep.client.post("/shadow", json={"version": 2})
    assert chosen.status_code == 200, chosen.text
    ep.wait_for(lambda s: bool(ready_replicas(s, "candidate")), what="the candidate replica")
    for part in (set_requests.head(60), set_requests.tail(60)):
        answered = ep.score(records(part, v1.input_columns))
        assert {r["model_version"] for r in answered.json()["predictions"]} == {1}  # shadowing never answers
    status = ep.wait_for(lambda s: s["shadow"]["compared_rows"] == 120, what="120 compared rows", timeout_s=90)

    served, candidate = expected_rows(v1, set_requests), expected_rows(v2, set_requests)
    kinds = {"delay_model_prediction": "label", "delay_model_probability": "value",
             "minutes_model_prediction": "value", "late_risk": "value", "late_flag": "label"}
    shadow = status["shadow"]
    assert {c: f["kind"] for c, f in shadow["columns"].items()} == kinds
    for column in kinds:
        agreed = sum(close(c[column], s[column]) for s, c in zip(served, candidate))
        assert shadow["columns"][column]["agreed_rows"] == agreed, column
        assert shadow["columns"][column]["agreement_percent"] == round(100 * agreed / 120, 3)
    whole = sum(all(close(c[k], s[k]) for k in kinds) for s, c in zip(served, candidate))
    assert shadow["agreed_rows"] == whole
    assert shadow["columns"]["delay_model_probability"]["agreed_rows"] < 120  # v2 answers other probabilities
    assert shadow["sentence"].startswith(f"candidate v2 agreed with v1 on {100 * whole / 120:.1f}% of 120 "
                                         "compared rows; lowest column: ")
    example = shadow["disagreement_examples"][0]
    assert example["column"] in kinds and example["served"] != example["candidate"]
    assert ep.client.delete("/shadow").status_code == 200


def test_a_failing_canary_of_a_set_is_rolled_back(set_endpoint, set_versions: SetVersions,
                                                  set_requests: pd.DataFrame) -> None:
    ep = set_endpoint
    started = ep.client.post("/canary", json={"version": 2, "share_percent": 50})
    assert started.status_code == 200, started.text
    status = ep.wait_for(lambda s: bool(ready_replicas(s, "candidate")), what="the candidate replica")
    candidate = ready_replicas(status, "candidate")[0]
    request = set_requests.iloc[2:5]
    want = {1: expected_rows(set_versions.v1, request), 2: expected_rows(set_versions.v2, request)}
    rows = records(request, set_versions.v1.input_columns)

    answers = [ep.score(rows).json() for _ in range(10)]
    assert sorted(a["model_version"] for a in answers) == [1] * 5 + [2] * 5  # the whole set answers for real
    for a in answers:
        assert_set_answers(a["predictions"], want[a["model_version"]])

    # the injected failure: the candidate's replicas keep dying (a death is replaced; the third rolls it back)
    codes, deadline, killed = [], time.monotonic() + 120, {candidate["replica_id"]}
    os.kill(candidate["pid"], signal.SIGKILL)
    while not ep.events("ml.canary.rollback") and time.monotonic() < deadline:
        reply = ep.score(rows)
        codes.append(reply.status_code)
        for replica in ep.status()["replicas"]:  # its replacement, starting or ready
            if replica["role"] == "candidate" and replica["pid"] and replica["replica_id"] not in killed:
                killed.add(replica["replica_id"])
                os.kill(replica["pid"], signal.SIGKILL)
    assert codes and set(codes) == {200}  # callers never saw a candidate replica die
    rollback = [e.detail for e in ep.events("ml.canary.rollback")]
    assert len(rollback) == 1 and rollback[0]["candidate_version"] == 2
    assert rollback[0]["candidate_replica_deaths"] == 3 and rollback[0]["production_failures"] == 0
    status = ep.status()
    assert status["canary"] is None and status["candidate_version"] is None
    assert_set_answers(ep.score(rows).json()["predictions"], want[1])
