"""Serving a feature-lookup model: a real ``lakescore serve`` on 127.0.0.1 answers requests that carry
the row's own columns and keys by joining the feature rows its holder read at start (weather by
origin + time_hour point in time, planes by tailnum), exactly as the chain answers the joined rows;
status and records carry the feature table versions, and ``POST /deploy`` reads the tables again."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
from functools import partial
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import psutil
import pytest
from serving_helpers import MODEL, REPO, assert_same_answers, expected_rows, launch, ready_replicas, records

from lakescore.chain import FittedChain
from lakescore.runtime import LocalRuntime

pytestmark = pytest.mark.long

WEATHER = "main.flights.weather"
PLANES = "main.flights.planes"
REQUEST = ["dep_delay", "origin", "time_hour", "tailnum"]  # the chain's inputs minus temp/plane_year, plus keys


@dataclasses.dataclass(frozen=True)
class LookupModel:
    home: Path
    config_dir: Path
    chain: FittedChain
    weather: pd.DataFrame
    planes_v0: pd.DataFrame
    planes_rest: pd.DataFrame  # the plane rows v0 lacks (appended as v1 by the deploy test)
    requests: pd.DataFrame


@pytest.fixture(scope="module")
def lookup_model(tmp_path_factory: pytest.TempPathFactory, demo_tables: dict[str, pd.DataFrame]) -> LookupModel:
    """One registered lookup model (v1, champion): trained on 1,500 flights joined with weather (point
    in time) and half of the planes (every other row), and 14 late-year flights to send."""
    from lakescore.admission.evidence import admit
    from lakescore.frames import derive_label
    from lakescore.lookup import FeatureLookup, join_all
    from lakescore.packaging import log_and_register
    from lakescore.training import ChainRecipe, fit_chain

    root = tmp_path_factory.mktemp("serving-lookup")
    runtime = LocalRuntime(root / ".lakescore")
    shutil.copytree(REPO / "config", root / "config")
    flights = demo_tables["main.flights.flights"]
    weather = demo_tables[WEATHER].drop_duplicates(["origin", "time_hour"])[["origin", "time_hour", "temp"]]
    planes = demo_tables[PLANES][["tailnum", "year"]]
    planes_v0, planes_rest = planes.iloc[::2].reset_index(drop=True), planes.iloc[1::2].reset_index(drop=True)
    train_rows = flights[flights["month"] <= 9].iloc[::150].head(1500).reset_index(drop=True)
    runtime.write_table("main.flights.flights", train_rows)
    runtime.write_table(WEATHER, weather.reset_index(drop=True))
    runtime.write_table(PLANES, planes_v0)
    specs = (FeatureLookup(WEATHER, ("origin",), ("temp",), timestamp_lookup_key="time_hour"),
             FeatureLookup(PLANES, ("tailnum",), ("year",), (("year", "plane_year"),)))
    joined = join_all(train_rows, {WEATHER: weather, PLANES: planes_v0}, specs)
    recipe = [{"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "temp", "plane_year"],
               "strategy": "median"},
              {"step": "StandardScaler", "name": "scale", "columns": ["dep_delay", "temp", "plane_year"]}]
    chain = fit_chain(joined, derive_label(joined, column="is_late", expression="arr_delay > 15"),
                      ChainRecipe(steps=recipe, model_class="LogisticRegression", model_params={"max_iter": 300},
                                  feature_columns=["dep_delay", "temp", "plane_year"]))
    chain = dataclasses.replace(chain, lookups=specs, lookup_versions=(0, 0))
    runtime.mlflow()
    with mlflow.start_run():
        log_and_register(chain, example=joined.head(5), name=MODEL, alias="champion",
                         evidence=admit(chain, joined.iloc[1000:]))
    late = flights[(flights["month"] >= 10) & flights["dep_delay"].notna()]
    in_v0, in_rest = set(planes_v0["tailnum"]), set(planes_rest["tailnum"])
    known = late[late["tailnum"].isin(in_v0)].iloc[::700].head(8)
    rest = late[late["tailnum"].isin(in_rest)].iloc[::900].head(4)  # no plane row until planes v1
    unknown = late.iloc[[5, 6]].assign(tailnum=["NOPLANE1", None])  # never a plane row
    requests = pd.concat([known, rest, unknown]).reset_index(drop=True)
    return LookupModel(root / ".lakescore", root / "config", chain, weather, planes_v0, planes_rest, requests)


def request_rows(frame: pd.DataFrame) -> list[dict]:  # type: ignore[type-arg]
    rows = records(frame, REQUEST)
    for row, when in zip(rows, frame["time_hour"]):
        row["time_hour"] = when.isoformat()
    return rows


def expected(model: LookupModel, frame: pd.DataFrame, planes: pd.DataFrame) -> list[dict]:  # type: ignore[type-arg]
    from lakescore.lookup import join_all

    joined = join_all(frame.reset_index(drop=True), {WEATHER: model.weather, PLANES: planes}, model.chain.lookups)
    return expected_rows(model.chain, joined)


def test_a_lookup_model_is_served_from_the_feature_rows_read_at_start_and_reloaded_on_deploy(
        lookup_model: LookupModel) -> None:
    model = lookup_model
    ep = launch(model.home, model.config_dir, endpoint_name="lookups", replicas={"min": 1, "max": 1},
                record_flush_interval_s=1)
    try:
        status = ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        v0 = [{"table": WEATHER, "version": 0}, {"table": PLANES, "version": 0}]
        assert status["feature_tables"] == v0 and ready_replicas(status)[0]["feature_tables"] == v0
        memory = status["memory"]  # the feature holder (the replica's parent) is one of the processes counted
        assert [h["pid"] for h in memory["feature_holders"]] == [psutil.Process(ready_replicas(status)[0]["pid"]).ppid()]
        parts = [memory["endpoint"], memory["fork_server"], *memory["feature_holders"], *memory["replicas"],
                 *memory["other_processes"]]
        assert memory["feature_holders"][0]["pss_mb"] > 0
        assert memory["total_pss_mb"] == pytest.approx(sum(p["pss_mb"] for p in parts), abs=0.5)

        resp = ep.score(request_rows(model.requests))
        assert resp.status_code == 200, resp.text
        got = resp.json()["predictions"]
        assert_same_answers(got, expected(model, model.requests, model.planes_v0))
        assert all(r["feature_tables"] == v0 and r["served"] == "warm" for r in got)
        assert all(r["scoring_status"] == "predicted" for r in got)  # unknown tailnums: imputed, not refused

        # hand check, point in time: 40 minutes past the hour takes that hour's weather row, never the next
        row = model.requests.iloc[[0]].reset_index(drop=True)
        asked = row.assign(time_hour=row["time_hour"] + pd.Timedelta(minutes=40))
        at_origin = model.weather[(model.weather["origin"] == row.at[0, "origin"])].set_index("time_hour")["temp"]
        temp = float(at_origin.loc[row.at[0, "time_hour"]])
        assert not np.isclose(temp, float(at_origin.loc[row.at[0, "time_hour"] + pd.Timedelta(hours=1)]))
        year = float(model.planes_v0.set_index("tailnum").at[row.at[0, "tailnum"], "year"])
        by_hand = expected_rows(model.chain, row.assign(temp=temp, plane_year=year))
        answer = ep.score(request_rows(asked)).json()["predictions"]
        assert_same_answers(answer, by_hand)
        # an unknown tailnum answers as the chain does with plane_year missing (the imputer's median)
        unknown = model.requests.iloc[[12]].reset_index(drop=True)
        imputed = expected_rows(model.chain, unknown.assign(
            temp=float(model.weather.set_index(["origin", "time_hour"]).at[(unknown.at[0, "origin"],
                                                                             unknown.at[0, "time_hour"]), "temp"]),
            plane_year=np.nan))
        assert_same_answers(ep.score(request_rows(unknown)).json()["predictions"], imputed)

        # planes v1 adds the rows v0 lacked; the endpoint answers from v0 until POST /deploy reads them again
        LocalRuntime(model.home).write_table(PLANES, model.planes_rest, mode="append")
        rest = model.requests.iloc[8:12].reset_index(drop=True)
        before = ep.score(request_rows(rest)).json()["predictions"]
        assert_same_answers(before, expected(model, rest, model.planes_v0))
        deployed = ep.client.post("/deploy", json={"version": 1})
        assert deployed.status_code == 200, deployed.text
        v1 = [{"table": WEATHER, "version": 0}, {"table": PLANES, "version": 1}]
        assert deployed.json()["feature_tables"] == v1 and deployed.json()["drained_replicas"] == 1
        status = ep.wait_for(lambda s: s["feature_tables"] == v1 and bool(ready_replicas(s))
                             and all(c["feature_tables"] == v1 for c in s["replicas"]), what="the reloaded replica")
        after = ep.score(request_rows(rest)).json()["predictions"]
        both = pd.concat([model.planes_v0, model.planes_rest], ignore_index=True)
        assert_same_answers(after, expected(model, rest, both))
        assert [a["probability"] for a in after] != pytest.approx([b["probability"] for b in before])
        assert all(r["feature_tables"] == v1 for r in after)

        assert ep.client.post("/flush").status_code == 200
        table = LocalRuntime(model.home).read_table("main.flights.late_arrival_inference")
        versions = [json.loads(v) for v in table["feature_tables"]]
        assert versions.count(v0) == 14 + 1 + 1 + 4 and versions.count(v1) == 4
    finally:
        ep.stop()


def test_a_request_must_carry_the_keys_and_a_time_and_never_the_looked_up_columns(
        lookup_model: LookupModel) -> None:
    model = lookup_model
    ep = launch(model.home, model.config_dir, endpoint_name="lookup_checks", replicas={"min": 0, "max": 1})
    try:
        rows = request_rows(model.requests.head(3))
        sent_temp = ep.score([{**rows[0], "temp": 3.0}, *rows[1:]])
        assert sent_temp.status_code == 400 and "unknown column 'temp' in row 0" in sent_temp.json()["message"]
        no_time = ep.score([rows[0], {**rows[1], "time_hour": None}])
        assert no_time.status_code == 400
        assert "column 'time_hour' needs an ISO 8601 timestamp" in no_time.json()["message"]
        assert "in row 1" in no_time.json()["message"]
        bad_time = ep.score([{**rows[0], "time_hour": "yesterday"}])
        assert bad_time.status_code == 400 and "'yesterday'" in bad_time.json()["message"]
        no_key = ep.score([{k: v for k, v in rows[0].items() if k != "tailnum"}])
        assert no_key.status_code == 400 and "row 0 lacks column 'tailnum'" in no_key.json()["message"]
    finally:
        ep.stop()


def test_the_cold_path_joins_the_feature_tables_at_the_pinned_versions(lookup_model: LookupModel) -> None:
    from lakescore.serving.http.wire import parse_request
    from lakescore.serving.replicas.cold import ColdFeatures, cold_reply
    from lakescore.workflows.serve import read_serving_features

    model = lookup_model
    runtime = LocalRuntime(model.home)
    runtime.mlflow()
    frame = model.requests.iloc[8:12].reset_index(drop=True)  # their planes rows exist from planes v1 on
    columns = {"dep_delay": "double", "origin": "key", "time_hour": "timestamp", "tailnum": "key"}
    body = parse_request(json.dumps({"dataframe_records": request_rows(frame)}).encode(), columns,
                         max_body_bytes=1 << 20, max_rows=100).to_body()
    specs = tuple(s.to_json() for s in model.chain.lookups)
    pinned = ColdFeatures(partial(read_serving_features, runtime), specs, {WEATHER: 0, PLANES: 0})
    reply = json.loads(cold_reply(f"models:/{MODEL}/1", 1, mlflow.get_tracking_uri(), body, pinned).payload)
    assert_same_answers(reply["predictions"], expected(model, frame, model.planes_v0))
    assert reply["predictions"][0]["feature_tables"] == [{"table": WEATHER, "version": 0},
                                                         {"table": PLANES, "version": 0}]
    without = json.loads(cold_reply(f"models:/{MODEL}/1", 1, mlflow.get_tracking_uri(), body).payload)
    assert without["error_code"] == "serving_failed" and "joins feature lookups" in without["message"]


def fork_server_children(status: dict) -> set[int]:  # type: ignore[type-arg]
    """The processes forked from the endpoint's fork server: its feature holders (and, for a moment,
    a registry read or a cold-path child)."""
    return {p.pid for p in psutil.Process(status["memory"]["fork_server"]["pid"]).children()}


def test_a_redeploy_whose_replica_fails_leaves_the_served_feature_rows_in_charge_and_no_holder_behind(
        lookup_model: LookupModel) -> None:
    model = lookup_model
    ep = launch(model.home, model.config_dir, endpoint_name="lookup_redeploy", replicas={"min": 1, "max": 1})
    try:
        status = ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        served, first = status["feature_tables"], ready_replicas(status)[0]
        holder = psutil.Process(first["pid"]).ppid()
        assert first["feature_tables"] == served and holder in fork_server_children(status)
        elsewhere = model.weather.head(1).assign(origin="ZZZ")  # a new Delta version no request joins
        LocalRuntime(model.home).write_table(WEATHER, elsewhere.reset_index(drop=True), mode="append")
        # the new replica cannot load: its model file is broken while the deploy runs (the served replica loaded it)
        saved = {path: path.read_bytes() for path in model.home.glob("mlartifacts/**/chain/model.joblib")}
        assert saved
        try:
            for path in saved:
                path.write_bytes(b"not a model")
            failed = ep.client.post("/deploy", json={"version": 1})
        finally:
            for path, data in saved.items():
                path.write_bytes(data)
        assert failed.status_code == 502, failed.text
        assert "no replica of v1 became ready" in failed.json()["message"]
        assert [e.detail["version"] for e in ep.events("ml.deploy.failed") if e.endpoint == "lookup_redeploy"] == [1]

        status = ep.status()
        assert status["feature_tables"] == served and [c["replica_id"] for c in status["replicas"]] == [first["replica_id"]]
        answer = ep.score(request_rows(model.requests.head(3)))
        assert answer.status_code == 200 and all(r["feature_tables"] == served for r in answer.json()["predictions"])
        # the deploy's holder is gone: the fork server holds the served replica's holder only (a registry read
        # may come and go meanwhile)
        status = ep.wait_for(lambda s: fork_server_children(s) == {holder}, what="one feature holder", timeout_s=30)

        # a replica started later (the served one was killed) joins the served rows, from the same holder
        os.kill(first["pid"], signal.SIGKILL)
        status = ep.wait_for(lambda s: any(c["replica_id"] != first["replica_id"] for c in ready_replicas(s)),
                             what="the replacement replica")
        (later,) = ready_replicas(status)
        assert later["feature_tables"] == served and status["feature_tables"] == served
        assert psutil.Process(later["pid"]).ppid() == holder
        ep.wait_for(lambda s: fork_server_children(s) == {holder}, what="still one feature holder", timeout_s=30)
        answer = ep.score(request_rows(model.requests.head(3)))
        assert answer.status_code == 200 and all(r["feature_tables"] == served for r in answer.json()["predictions"])
    finally:
        ep.stop()
