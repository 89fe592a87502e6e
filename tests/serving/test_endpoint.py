"""A real endpoint on 127.0.0.1: warm and cold answers equal batch scoring, the token, bad input,
idempotency keys (replayed for the same request, 422 for another, one scored when they race),
recording, stale marking, a burst at zero replicas (queued, answered warm), and killed replicas (the
requests wait for another replica; none fails)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pandas as pd
import psutil
import pytest
import yaml
from serving_fakes import fake_endpoint, one_row, ready_replica
from serving_helpers import (
    MODEL,
    Trained,
    assert_same_answers,
    chain_of,
    expected_rows,
    launch,
    ready_replicas,
    records,
)

from lakescore.config import load_project
from lakescore.errors import EndpointUnavailableError, IdempotencyKeyReusedError, RequestError
from lakescore.runtime import LocalRuntime
from lakescore.serving.policy.canary import CanaryWindow
from lakescore.serving.replicas.backend import ReplicaStatus
from lakescore.serving.replicas.channel import ReplicaChannels


def test_max_warm_replicas_counts_every_endpoint_and_the_candidates(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, max_warm_replicas=2, replicas={"min": 1, "max": 2},
                                           target_rpm_per_replica=1)
        state.add_replica("other-serve-v5-1", endpoint="other", role="candidate", version=5, pid=None, address="x")
        await ep.autoscaler.scale_pass()  # below replicas.min: one replica (2 resident with the other endpoint's)
        backend.states[backend.started[0]] = ReplicaStatus("ready")
        await ep.health.check()
        ep.autoscaler.arrivals, ep.autoscaler.reading = 100, (ep.autoscaler.reading[0] - 60, 0)  # 100 requests/min against 1 per replica
        ep.autoscaler.last_up_at -= 60  # a scale interval after the start
        held = await ep.autoscaler.scale_pass()
        assert held.action == "hold" and len(backend.started) == 1
        assert held.reason.endswith("but max_warm_replicas 2 replicas are resident across endpoints")
        assert ep.autoscaler.desired == 2 and ep.status()["state"] == "ready"
        assert await ep._start_replica("candidate", 2) is None  # shadow and canary replicas count too
        assert len(backend.started) == 1

    asyncio.run(scenario())


def test_a_serve_replica_started_across_a_deploy_holds_the_new_version(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)

        def deploy_switches(replica_id: str, version: int) -> None:  # while the scaler's start runs
            backend.on_start = None
            ep.plan = ep.plan.deployed(2, input_columns={"a": "long"}, task="classification", alias_version=None)

        backend.on_start = deploy_switches
        replica = await ep._start_replica("serve", 1)
        assert replica.version == 2 and [c.version for c in ep.pool.replicas.values()] == [2]
        assert backend.stopped == [backend.started[0]] and len(backend.started) == 2

    asyncio.run(scenario())


def test_a_request_queued_across_a_deploy_is_checked_against_the_new_columns(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)
        typed = one_row({"a": "string", "b": "long"}, {"a": "x", "b": 1})  # checked against v1's columns
        reordered = one_row({"a": "long", "b": "long"}, {"a": 7, "b": 1})  # (another v1 in this case)
        v2 = {"b": "long", "a": "long"}  # 'a' is a whole number now, and the order changed
        ep.columns[2] = v2
        ep.plan = ep.plan.deployed(2, input_columns=v2, task="classification", alias_version=None)
        replica = await ready_replica(ep, backend, "serve", 2)
        with pytest.raises(RequestError, match="switched to v2 while the request waited.*column 'a'") as caught:
            await ep.answer(typed, typed.to_body(), hold_s=None)
        assert caught.value.http_status == 400 and not replica.busy and replica.requests == 0
        reply = await ep.answer(reordered, reordered.to_body(), hold_s=None)
        assert reply.payload["model_version"] == 2
        assert reply.rows == [{"columns": ["b", "a"], "data": [[1, 7]]}]  # in v2's order and types

    asyncio.run(scenario())


def test_a_request_pinned_to_the_old_version_goes_cold_after_a_deploy(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)
        cold: list[int] = []

        async def cold_path(version: int, body: bytes) -> list[dict]:  # type: ignore[type-arg]
            cold.append(version)
            return [{"cold": version}]

        ep._cold_path = cold_path  # type: ignore[method-assign]
        old = await ready_replica(ep, backend, "serve", 1)
        assert await ep.pool.acquire("serve", wait_s=0) is old  # busy: the request queues
        request = one_row({"a": "long"}, {"a": 1}, model_version=1)
        waiting = asyncio.create_task(ep.answer(request, request.to_body(), hold_s=None))
        await asyncio.sleep(0.05)
        assert ep.pool.waiting == 1
        ep.plan = ep.plan.deployed(2, input_columns={"a": "long"}, task="classification", alias_version=None)
        ep.columns[2] = {"a": "long"}
        new = await ready_replica(ep, backend, "serve", 2)  # ready: the queued request takes it
        reply = await waiting
        assert (reply.payload["model_version"], reply.payload["served"], cold) == (1, "cold", [1])
        assert not new.busy and new.requests == 0

    asyncio.run(scenario())


def test_the_flush_loop_keeps_running_after_an_error(tmp_path) -> None:
    async def scenario() -> None:
        ep, _, state = fake_endpoint(tmp_path, record_flush_interval_s=0.1)
        calls = []

        def locked(*, older_than_s: float) -> None:
            calls.append(older_than_s)
            raise sqlite3.OperationalError("database is locked")

        state.forget_replies = locked  # type: ignore[method-assign]
        loop = asyncio.create_task(ep._flush_loop())
        await asyncio.sleep(0.45)
        assert not loop.done() and len(calls) >= 2
        assert ep.counts["flush_errors"] == len(calls)
        assert ep.loop_error == "flush error: OperationalError: database is locked"
        loop.cancel()

    asyncio.run(scenario())


def test_a_cancelled_request_frees_its_replica(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)
        replica = await ready_replica(ep, backend, "serve", 1, delay_s=5.0)
        request = one_row({"a": "long"}, {"a": 1})
        task = asyncio.create_task(ep.answer(request, request.to_body(), hold_s=None))
        await asyncio.sleep(0.2)
        assert replica.busy
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not replica.busy and await ep.pool.acquire("serve", wait_s=0) is replica

    asyncio.run(scenario())


def test_a_canary_answer_names_the_version_of_the_replica_that_gave_it(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)
        await ready_replica(ep, backend, "serve", 1)
        ep.candidates.canary = CanaryWindow(2, 100, 600)  # v2's window; v3 was chosen while it waited
        await ready_replica(ep, backend, "candidate", 3)
        request = one_row({"a": "long"}, {"a": 1})
        reply = await ep.answer(request, request.to_body(), hold_s=None)
        assert reply.by_candidate and reply.payload["model_version"] == 3 and reply.headers["X-Model-Version"] == "3"

    asyncio.run(scenario())


def test_a_request_at_zero_replicas_is_counted_once(tmp_path) -> None:
    async def scenario() -> None:
        ep, _, _ = fake_endpoint(tmp_path, replicas={"min": 0, "max": 1})
        counted = ep.autoscaler.demand()  # held: no replica is alive
        assert counted and ep.autoscaler.demand(counted=counted)  # then routed again (cold): not again
        ep.pool.waiting = 1  # and it still waits in the queue when the pass runs
        decision = await ep.autoscaler.scale_pass()
        assert decision.reason == "scaled up from 0 replicas to 1: 1 request(s) arrived at zero replicas"

    asyncio.run(scenario())


def test_max_queue_0_bounds_only_the_waiting_so_the_cold_path_and_the_canary_still_answer(tmp_path,
                                                                                          monkeypatch) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path, max_queue=0, cold_max_concurrent=1)
        scored: list[int] = []
        gate = asyncio.Event()

        async def score_cold(*, version: int, **_: object) -> list[dict]:  # type: ignore[type-arg]
            scored.append(version)  # the seam: a fresh process that loads the version (test_cold.py)
            await gate.wait()
            return [{"cold": version}]

        monkeypatch.setattr("lakescore.serving.endpoint.score_cold", score_cold)
        ep.autoscaler.no_room = True  # no replica is alive and none can start: the cold path answers
        request = one_row({"a": "long"}, {"a": 1})
        first = asyncio.create_task(ep.answer(request, request.to_body(), hold_s=None))
        await asyncio.sleep(0.05)
        with pytest.raises(EndpointUnavailableError, match="0 requests already wait for the cold path"):
            await ep.answer(request, request.to_body(), hold_s=None)  # its one slot is busy: nobody waits
        gate.set()
        assert (await first).payload["served"] == "cold" and scored == [1]
        # In the canary's share with its replica busy: production answers (a reroute), not a 503.
        ep.autoscaler.no_room = False
        await ready_replica(ep, backend, "serve", 1)
        candidate = await ready_replica(ep, backend, "candidate", 2)
        ep.candidates.canary = CanaryWindow(2, 100, 600)
        candidate.busy = True
        pinned = one_row({"a": "long"}, {"a": 1})
        assert (await ep.answer(pinned, pinned.to_body(), hold_s=None)).payload["model_version"] == 1
        assert ep.candidates.canary.counts()["candidate_rerouted"] == 1

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def endpoint(module_home, trained: Trained):
    home, config = module_home
    ep = launch(home, config, endpoint_name="main", scale_interval_s=1, record_flush_interval_s=1,
                record_flush_rows=10_000)
    try:
        ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        yield ep
    finally:
        ep.stop()


@pytest.fixture(scope="module")
def runtime(module_home) -> LocalRuntime:
    rt = LocalRuntime(module_home[0])
    rt.mlflow()
    return rt


def test_requests_without_the_token_get_401(endpoint) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {endpoint.token}"}):
        for method, path in (("POST", "/invocations"), ("GET", "/status"), ("POST", "/shadow")):
            resp = httpx.request(method, endpoint.address + path, headers=headers, json={})
            assert resp.status_code == 401, (method, path, headers)
            assert resp.json()["error_code"] == "unauthorized"


def test_a_null_whole_number_is_answered_like_the_batch_routes(endpoint, trained: Trained, runtime: LocalRuntime) -> None:
    """Issue 9: a null in a long input (``hour``) is scored as a null (the recipe imputes it), not
    refused with a 400 the batch routes never give."""
    frame = trained.requests.head(3).reset_index(drop=True)
    frame["hour"] = frame["hour"].astype("Int64")
    frame.loc[1, "hour"] = pd.NA
    resp = endpoint.score(records(frame, trained.input_columns))
    assert resp.status_code == 200, resp.text
    assert_same_answers(resp.json()["predictions"], expected_rows(chain_of(runtime, 1), frame))


def test_warm_answers_equal_batch_scoring(endpoint, trained: Trained, runtime: LocalRuntime, module_home) -> None:
    rows = records(trained.requests, trained.input_columns)
    resp = endpoint.score(rows)
    assert resp.status_code == 200
    body = resp.json()
    assert body["served"] == "warm" and resp.headers["x-served-by"] == "warm"
    assert [(r["served"], r["model_version"]) for r in body["predictions"]] == [("warm", 1)] * len(rows)
    want = expected_rows(chain_of(runtime, 1), trained.requests)
    assert_same_answers(body["predictions"], want)
    reasons = {r["exclusion_reason"] for r in want}
    assert None in reasons and len(reasons) >= 2  # the rows cover predicted and excluded answers
    # One row at a time gives the same answers as the whole request.
    for i in (0, 24, 27):
        single = endpoint.score([rows[i]]).json()["predictions"]
        assert_same_answers(single, [want[i]])

    # The batch route on the same rows: `lakescore score` with batch_compute single_node.
    home, config = module_home
    inference = yaml.safe_load((config / "inference.yml").read_text())
    inference["batch_compute"] = "single_node"
    (config / "inference.yml").write_text(yaml.safe_dump(inference))
    project = load_project(config)  # table names with the bundle's ${catalog}.${schema} filled in
    runtime.write_table(project.inference.score_source_table, trained.requests.reset_index(drop=True))
    from lakescore.workflows.score import score

    batch = score(project, runtime).predictions
    by_id = batch.set_index("flight_id")
    batch_rows = [{k: (None if pd.isna(v) else v) for k, v in by_id.loc[fid, ["prediction", "probability",
                   "scoring_status", "exclusion_reason"]].items()} for fid in trained.requests["flight_id"]]
    assert_same_answers(body["predictions"], batch_rows)


def forward_to_replica(address: str, body: bytes) -> tuple[int, bytes]:
    """Send a body straight to a replica over its channel, bypassing the endpoint's checks."""
    async def ask() -> tuple[int, bytes]:
        channels = ReplicaChannels(timeout_s=30)
        try:
            return await channels.score(address, body)
        finally:
            channels.close()

    return asyncio.run(ask())


def test_malformed_input_gets_4xx_and_the_replica_keeps_serving(endpoint, trained: Trained) -> None:
    replica = ready_replicas(endpoint.status())[0]
    good = records(trained.requests.head(2), trained.input_columns)
    bad_requests = [
        (b"{\"dataframe_records\": [", 400, "not valid JSON"),
        ({"dataframe_records": [{**good[0], "tailnum": "N1"}]}, 400, "unknown column 'tailnum'"),
        ({"dataframe_records": [{**good[0], "distance": "far"}]}, 400, "column 'distance' needs a whole number or null"),
        ({"dataframe_records": [{k: v for k, v in good[0].items() if k != "origin"}]}, 400, "lacks column 'origin'"),
        ({"dataframe_records": good * 600}, 413, "max_rows_per_request"),
        (b"x" * ((1 << 20) + 1), 413, "max_body_bytes"),
    ]
    for body, status, names in bad_requests:
        resp = (endpoint.client.post("/invocations", content=body) if isinstance(body, bytes)
                else endpoint.client.post("/invocations", json=body))
        assert resp.status_code == status, (names, resp.text)
        assert names in resp.json()["message"]
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        assert forward_to_replica(replica["address"], raw)[0] >= 400  # the replica itself, sent what the endpoint refuses
    assert endpoint.score(good).status_code == 200
    after = ready_replicas(endpoint.status())[0]
    assert (after["replica_id"], after["pid"]) == (replica["replica_id"], replica["pid"])  # the same replica kept serving


def test_another_version_is_answered_on_the_cold_path(endpoint, trained: Trained, runtime: LocalRuntime) -> None:
    rows = records(trained.requests.head(8), trained.input_columns)
    resp = endpoint.score(rows, model_version=2)
    assert resp.status_code == 200
    body = resp.json()
    assert body["served"] == "cold" and body["model_version"] == 2
    assert [(r["served"], r["model_version"]) for r in body["predictions"]] == [("cold", 2)] * 8
    v2 = expected_rows(chain_of(runtime, 2), trained.requests.head(8))
    assert_same_answers(body["predictions"], v2)
    v1 = expected_rows(chain_of(runtime, 1), trained.requests.head(8))
    assert [r["probability"] for r in v1] != [r["probability"] for r in v2]  # the versions really differ


def test_a_retried_request_is_answered_once(endpoint, trained: Trained) -> None:
    from lakescore.serving.http.client import ClientSettings, EndpointClient

    rows = records(trained.requests.head(2), trained.input_columns)
    assert endpoint.client.post("/flush").status_code == 200
    before = len(endpoint.events("ml.predict_query"))
    first = endpoint.score(rows, headers={"Idempotency-Key": "job-7:1"})
    again = endpoint.score(rows, headers={"Idempotency-Key": "job-7:1"})
    assert first.status_code == again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["request_id"] == first.json()["request_id"]
    client = EndpointClient.from_home(endpoint.home, "main", settings=ClientSettings(hold_s=5, deadline_s=60),
                                      job_id="job-7")
    assert client.predict(rows)["request_id"] == first.json()["request_id"]  # the client's key is job-7:1 too
    client.close()
    assert endpoint.client.post("/flush").status_code == 200
    assert len(endpoint.events("ml.predict_query")) == before + 1


def test_a_key_used_again_for_other_rows_is_refused_with_422(endpoint, trained: Trained) -> None:
    from lakescore.serving.http.client import ClientSettings, EndpointClient

    columns = list(trained.input_columns)
    one = records(trained.requests.iloc[[2]], columns)
    two = records(trained.requests.iloc[[3, 4]], columns)
    key = {"Idempotency-Key": "job-9:1"}
    assert endpoint.client.post("/flush").status_code == 200
    before = len(endpoint.events("ml.predict_query"))
    first = endpoint.score(one, headers=key)
    assert first.status_code == 200 and len(first.json()["predictions"]) == 1
    other = endpoint.score(two, headers=key)  # the issue: this got 200 and the one-row answer, replayed
    assert other.status_code == 422 and "idempotent-replayed" not in other.headers
    refused = other.json()
    assert refused["error_code"] == "idempotency_key_reused" and refused["key"] == "job-9:1"
    assert refused["message"].startswith("Idempotency-Key 'job-9:1' on endpoint 'main' was first used for another")
    assert endpoint.score(one, headers=key, model_version=2).status_code == 422  # another version is another request
    split = {"dataframe_split": {"columns": columns[::-1], "data": [[one[0][c] for c in columns[::-1]]]}}
    same = endpoint.client.post("/invocations", json=split, headers=key)  # the same row in the other shape
    assert same.status_code == 200 and same.headers["idempotent-replayed"] == "true"
    assert same.json()["request_id"] == first.json()["request_id"]
    rerun = EndpointClient.from_home(endpoint.home, "main", settings=ClientSettings(hold_s=5, deadline_s=60),
                                     job_id="job-9")
    with pytest.raises(IdempotencyKeyReusedError, match="'job-9:1' on endpoint 'main'.*a re-run must send the same "
                                                        "rows in the same order") as caught:
        rerun.predict(two)  # a re-run of job-9 whose first request has other rows
    assert caught.value.http_status == 422 and caught.value.fields["key"] == "job-9:1" and len(rerun.attempts) == 0
    rerun.close()
    assert endpoint.client.post("/flush").status_code == 200
    assert len(endpoint.events("ml.predict_query")) == before + 1  # one request was scored


def test_answers_are_recorded_in_batches_and_audited(endpoint, trained: Trained, runtime: LocalRuntime) -> None:
    numeric = [c for c in trained.input_columns if pd.api.types.is_numeric_dtype(trained.requests[c].dtype)]
    far = records(trained.requests.head(1), trained.input_columns)[0]
    far[numeric[0]] = 10**7 if pd.api.types.is_integer_dtype(trained.requests[numeric[0]].dtype) else 1e7
    drifted = endpoint.score([far]).json()["request_id"]
    assert endpoint.client.post("/flush").status_code == 200
    table = runtime.read_table("main.flights.late_arrival_inference")
    audited = [e.detail for e in endpoint.events("ml.predict_query")]
    assert len(table) == sum(e["rows"] for e in audited)
    assert set(table["request_id"]) == {e["request_id"] for e in audited}
    assert runtime.table_version("main.flights.late_arrival_inference") + 1 < len(audited)  # batched commits
    cold = table[table["served"] == "cold"]
    assert len(cold) == 8 and set(cold["model_version"]) == {2}
    excluded = table[table["scoring_status"] == "excluded"]
    assert len(excluded) >= 3 and excluded["prediction"].isna().all() and excluded["probability"].isna().all()
    assert excluded["exclusion_reason"].notna().all()
    check = table.loc[table["request_id"] == drifted, "drift_check"].tolist()
    assert len(check) == 1 and f"out_of_range:{numeric[0]}" in check[0].split(";")


def test_the_endpoint_process_answers_records_and_checks_drift_without_pandas(endpoint, trained: Trained) -> None:
    """The endpoint process holds no model: it parses, routes, checks drift and hands the inference
    table's records to a child of the fork server as plain rows, so it never maps pandas or numpy
    (about 80 MB of its resident memory before)."""
    assert endpoint.score(records(trained.requests.head(3), trained.input_columns)).status_code == 200
    assert endpoint.client.post("/flush").status_code == 200
    assert endpoint.status()["recorder"]["last_error"] == ""
    maps = Path(f"/proc/{endpoint.proc.pid}/maps").read_text()
    assert "/pandas/" not in maps and "/numpy/" not in maps and "/pyarrow/" not in maps


def test_concurrent_first_uses_of_a_key_score_one_request(endpoint, trained: Trained, runtime: LocalRuntime) -> None:
    """Eight requests at once under one new key, four with one row and four with two other rows, on
    the cold path (seconds per request, so the others arrive while the first is being scored)."""
    columns = list(trained.input_columns)
    bodies = {1: records(trained.requests.iloc[[5]], columns), 2: records(trained.requests.iloc[[6, 7]], columns)}
    want = {1: expected_rows(chain_of(runtime, 2), trained.requests.iloc[[5]]),
            2: expected_rows(chain_of(runtime, 2), trained.requests.iloc[[6, 7]])}
    cold_before = endpoint.status()["counts"].get("cold", 0)
    start = threading.Barrier(8)
    headers = {"Authorization": f"Bearer {endpoint.token}", "Idempotency-Key": "job-10:1"}

    def send(n_rows: int) -> tuple[int, httpx.Response]:
        start.wait(timeout=30)
        return n_rows, httpx.post(f"{endpoint.address}/invocations", headers=headers, timeout=120,
                                  json={"dataframe_records": bodies[n_rows], "model_version": 2})

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, [1, 2] * 4))
    answered = [(n, r) for n, r in results if r.status_code == 200]
    refused = [(n, r) for n, r in results if r.status_code != 200]
    assert len(answered) == len(refused) == 4, [r.status_code for _, r in results]
    winner = answered[0][0]  # whichever body claimed the key first
    assert {n for n, _ in answered} == {winner} and {n for n, _ in refused} == {3 - winner}
    assert len({r.json()["request_id"] for _, r in answered}) == 1
    assert sorted(r.headers.get("idempotent-replayed", "") for _, r in answered) == ["", "true", "true", "true"]
    for _, r in answered:
        assert_same_answers(r.json()["predictions"], want[winner])
    for _, r in refused:
        assert r.status_code == 422 and r.json()["error_code"] == "idempotency_key_reused"
        assert "Idempotency-Key 'job-10:1'" in r.json()["message"]
    assert endpoint.status()["counts"]["cold"] == cold_before + 1  # one request was scored


def test_moving_the_champion_marks_stale_and_keeps_the_answers(endpoint, trained: Trained,
                                                               runtime: LocalRuntime) -> None:
    runtime.mlflow().MlflowClient().set_registered_model_alias(MODEL, "champion", "2")
    status = endpoint.wait_for(lambda s: s["stale"], what="stale", timeout_s=30)
    assert status["stale_reason"].startswith("champion is v2; this endpoint still serves v1")
    resp = endpoint.score(records(trained.requests.head(3), trained.input_columns))
    assert [r["model_version"] for r in resp.json()["predictions"]] == [1, 1, 1]
    assert [e.detail["champion"] for e in endpoint.events("ml.endpoint.stale")] == [2]


def test_a_killed_replica_s_requests_wait_for_its_replacement(endpoint, trained: Trained,
                                                           runtime: LocalRuntime) -> None:
    replica = ready_replicas(endpoint.status())[0]
    rows = records(trained.requests.head(4), trained.input_columns)
    want = expected_rows(chain_of(runtime, 1), trained.requests.head(4))
    cold_before = endpoint.status()["counts"].get("cold", 0)
    os.kill(replica["pid"], signal.SIGKILL)
    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda part: endpoint.score(part), [rows[:2], rows[2:]]))
    assert [r.status_code for r in replies] == [200, 200]
    assert [r.json()["served"] for r in replies] == ["warm", "warm"]  # queued for the replacement, not cold
    assert_same_answers(replies[0].json()["predictions"] + replies[1].json()["predictions"], want)
    failed = [e.detail for e in endpoint.events("ml.replica.failed")]
    assert [f["replica_id"] for f in failed] == [replica["replica_id"]]
    status = endpoint.status()
    assert [c["replica_id"] for c in ready_replicas(status)] != [replica["replica_id"]]
    assert status["counts"].get("cold", 0) == cold_before


def test_a_burst_at_zero_replicas_is_queued_answered_warm_and_starts_one_replica_per_pass(module_home,
                                                                                    trained: Trained) -> None:
    """20 one-row requests at zero replicas: none gets a 503 or a cold answer, and the start at zero is
    that pass: no second replica starts before scale_interval_s has passed (replicas.max 3)."""
    home, config = module_home
    ep = launch(home, config, endpoint_name="burst", replicas={"min": 0, "max": 3}, scale_interval_s=10,
                request_timeout_s=90)  # a loaded test machine may start the first replica slowly
    try:
        assert ep.status()["state"] == "scaled to zero"
        time.sleep(6)  # past half an interval: the woken pass reads a rate (126 requests/min was read so)
        rows = records(trained.requests.head(20), trained.input_columns)
        start = threading.Barrier(20)

        def send(row: dict) -> httpx.Response:  # type: ignore[type-arg]
            start.wait(timeout=30)
            return httpx.post(f"{ep.address}/invocations", json={"dataframe_records": [row]}, timeout=120,
                              headers={"Authorization": f"Bearer {ep.token}"})

        with ThreadPoolExecutor(20) as pool:
            replies = list(pool.map(send, rows))
        assert [r.status_code for r in replies] == [200] * 20, [r.text[:200] for r in replies if r.status_code != 200]
        assert {r.json()["served"] for r in replies} == {"warm"}
        status = ep.status()
        assert status["counts"].get("cold", 0) == 0 and status["counts"]["served_warm"] == 20
        ups = [e for e in ep.events("ml.scale") if e.endpoint == "burst" and e.detail["action"] == "up"]
        assert (ups[0].detail["replicas_before"], ups[0].detail["replicas_after"]) == (0, 1)
        assert ups[0].detail["reason"].startswith("scaled up from 0 replicas to 1:")
        gaps = [round(b.ts - a.ts, 1) for a, b in zip(ups, ups[1:])]
        assert all(g >= 9.5 for g in gaps), gaps  # one start per pass, a start at zero included
    finally:
        ep.stop()


def test_killing_a_replica_under_load_fails_no_request(module_home, trained: Trained) -> None:
    home, config = module_home
    ep = launch(home, config, endpoint_name="two", replicas={"min": 2, "max": 2}, scale_interval_s=1)
    try:
        status = ep.wait_for(lambda s: len(ready_replicas(s)) == 2, what="two ready replicas")
        victim = ready_replicas(status)[0]
        rows = records(trained.requests.head(1), trained.input_columns)
        codes: list[tuple[int, str]] = []
        stop = threading.Event()

        def client_loop() -> None:
            with httpx.Client(base_url=ep.address, headers={"Authorization": f"Bearer {ep.token}"},
                              timeout=120) as client:
                while not stop.is_set():
                    resp = client.post("/invocations", json={"dataframe_records": rows})
                    codes.append((resp.status_code, resp.json().get("served", resp.text[:200])))

        threads = [threading.Thread(target=client_loop) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            while len(codes) < 50:
                time.sleep(0.05)
            os.kill(victim["pid"], signal.SIGKILL)  # mid-load: some request is on it now
            killed_at = len(codes)
            after = ep.wait_for(lambda s: len(ready_replicas(s)) == 2 and victim["replica_id"] not in
                                [c["replica_id"] for c in s["replicas"]], what="the replacement replica")
            while len(codes) < killed_at + 200:
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        assert len(codes) >= 250 and set(codes) == {(200, "warm")}, [c for c in codes if c != (200, "warm")][:5]
        assert [e.detail["replica_id"] for e in ep.events("ml.replica.failed") if e.endpoint == "two"] == [victim["replica_id"]]
        assert victim["replica_id"] not in [c["replica_id"] for c in after["replicas"]]
    finally:
        ep.stop()


def test_status_reports_the_memory_of_the_endpoint_its_fork_server_and_each_replica(endpoint) -> None:
    status = endpoint.wait_for(lambda s: s["drift_reference"] and s["memory"]["replicas"], what="the drift reference")
    memory = status["memory"]
    assert memory["endpoint"]["pid"] == endpoint.proc.pid
    assert memory["fork_server"]["pid"] == psutil.Process(ready_replicas(status)[0]["pid"]).ppid()
    assert sorted(c["pid"] for c in memory["replicas"]) == sorted(c["pid"] for c in status["replicas"])
    parts = [memory["endpoint"], memory["fork_server"], *memory["replicas"]]
    for part in parts:
        assert 0 < part["pss_mb"] < part["rss_mb"]  # each shares pages (libraries, or the fork's imports)
    assert memory["feature_holders"] == []  # no lookups in this model
    others = memory["other_processes"]  # the rest of the endpoint's process tree (the resource tracker)
    tree = {p.pid for p in psutil.Process(endpoint.proc.pid).children(recursive=True)}
    assert {p["pid"] for p in others} <= tree and {p["pid"] for p in parts[1:]} <= tree
    assert memory["total_pss_mb"] == pytest.approx(sum(p["pss_mb"] for p in parts + others), abs=0.5)
    # the endpoint holds no model: the registry reads, the drift reference and the table writes ran in
    # children of the fork server, so no model, registry or table library is mapped in it
    maps = open(f"/proc/{endpoint.proc.pid}/maps").read()
    for library in ("sklearn", "scipy", "sqlalchemy", "deltalake"):
        assert f"site-packages/{library}/" not in maps, library


def test_sigterm_stops_the_replicas_and_removes_the_address_file(endpoint) -> None:
    replicas = [c["pid"] for c in endpoint.status()["replicas"]]
    endpoint.proc.send_signal(signal.SIGTERM)
    assert endpoint.proc.wait(timeout=60) == 0
    assert not (endpoint.home / "serving" / "endpoints" / "main.json").exists()
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(pid) for pid in replicas) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert replicas and not any(psutil.pid_exists(pid) for pid in replicas)

