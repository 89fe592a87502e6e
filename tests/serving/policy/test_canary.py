"""Canary share, the counting rule (a request counts once, for the side that answered it; reroutes
for neither) and the rollback rules, on hand-worked figures and on an endpoint over scripted replicas;
then a real canary whose replicas are killed (charged nothing, replaced, rolled back on the third
death), and one whose replica starts under load (not charged for the requests it could not take)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import httpx
import pytest
from serving_fakes import fake_endpoint, one_row, ready_replica
from serving_helpers import Trained, assert_same_answers, chain_of, expected_rows, ready_replicas, records

from lakescore.runtime import LocalRuntime
from lakescore.serving.policy.canary import (
    MAX_CANDIDATE_DEATHS,
    CanaryWindow,
    deaths_reason,
    goes_to_canary,
    rollback_reason,
    verdict,
)
from lakescore.serving.policy.candidates import Candidate
from lakescore.serving.replicas.backend import ReplicaStatus


@pytest.mark.parametrize("share", [1, 5, 33, 50, 100])
def test_every_hundred_requests_hold_exactly_the_share(share: int) -> None:
    picks = [goes_to_canary(i, share) for i in range(300)]
    assert [sum(picks[k:k + 100]) for k in (0, 100, 200)] == [share] * 3


def test_rollback_needs_min_requests_and_a_gap_over_the_limit() -> None:
    rule = dict(max_gap=0.05, min_requests=20)
    assert rollback_reason(candidate_failures=19, candidate_requests=19, production_failures=0,
                           production_requests=100, **rule) is None  # too few candidate requests
    assert rollback_reason(candidate_failures=3, candidate_requests=20, production_failures=10,
                           production_requests=100, **rule) is None  # 15% - 10% = 5 points: not over
    reason = rollback_reason(candidate_failures=4, candidate_requests=20, production_failures=10,
                             production_requests=100, **rule)
    assert reason == ("candidate failed 4 of 20 requests (20.0%) against production 10 of 100 (10.0%): a gap of "
                      "10.0 points is over max_failure_rate_gap 5.0 points")


def test_the_window_forgets_old_outcomes() -> None:
    window = CanaryWindow(version=2, share_percent=10, window_s=60)
    window.record("candidate", "failed", now=0.0)
    window.record("production", "answered", now=30.0)
    window.record("candidate", "answered", now=61.0)
    assert {k: v for k, v in window.counts().items() if v} == {"candidate_requests": 1, "production_requests": 1}


@pytest.mark.parametrize(("outcome", "status", "want"), [
    ("ok", None, "answered"),
    ("error", 500, "failed"),  # a model error
    ("error", 422, "answered"),  # the request's own fault: production answers it so too
    ("timeout", None, "failed"),  # a ready replica that ran over request_timeout_s
    ("unavailable", None, "rerouted"),  # died mid-request, starting, gone, or its queue full
])
def test_a_request_counts_against_a_side_only_when_that_side_answered_it_badly(outcome, status, want) -> None:
    assert verdict(outcome, status=status) == want


def test_reroutes_and_replica_deaths_count_for_neither_rate_and_deaths_have_their_own_rule() -> None:
    window = CanaryWindow(version=2, share_percent=50, window_s=600)
    for t, side, what in [(1, "candidate", "answered"), (2, "candidate", "rerouted"), (3, "candidate", "died"),
                          (4, "production", "rerouted"), (5, "production", "failed"), (6, "production", "answered"),
                          (7, "candidate", "died")]:
        window.record(side, what, now=float(t))
    assert window.counts() == {"candidate_requests": 1, "candidate_failures": 0, "candidate_rerouted": 1,
                               "candidate_replica_deaths": 2, "production_requests": 2, "production_failures": 1,
                               "production_rerouted": 1, "production_replica_deaths": 0}
    assert window.check(max_gap=0.05, min_requests=1) is None  # 0% against 50%; two deaths are not three
    window.record("candidate", "died", now=8.0)
    assert window.check(max_gap=0.05, min_requests=1) == (
        "candidate replicas died 3 times in 600 s against production 0: at least 3 deaths, more than production")
    assert deaths_reason(candidate_deaths=3, production_deaths=3, window_s=600) is None  # both sides alike
    assert deaths_reason(candidate_deaths=2, production_deaths=0, window_s=600) is None


def canary_endpoint(tmp_path, share: int, **settings):  # type: ignore[no-untyped-def]
    ep, backend, state = fake_endpoint(tmp_path, replicas={"min": 1, "max": 2}, **settings)
    ep.candidates.candidate = Candidate(2, "classification", {"a": "long"})
    ep.candidates.canary = CanaryWindow(2, share, 600)
    return ep, backend, state


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def test_a_candidate_replica_that_died_is_rerouted_and_counts_for_neither_side(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = canary_endpoint(tmp_path, 100)
        await ready_replica(ep, backend, "serve", 1)
        dead = await ready_replica(ep, backend, "candidate", 2, listen=False)  # killed after its health check
        request = one_row({"a": "long"}, {"a": 1})
        reply = await ep.answer(request, request.to_body(), hold_s=None)
        assert reply.status == 200 and reply.payload["model_version"] == 1  # production answered it
        assert dead.state == "failed"
        again = await ep.answer(request, request.to_body(), hold_s=None)  # no ready candidate replica now
        assert again.payload["model_version"] == 1
        assert nonzero(ep.candidates.canary.counts()) == {"candidate_rerouted": 2}
        assert ep.status()["counts"]["canary_rerouted"] == 2 and "candidate_failures" not in ep.status()["counts"]

    asyncio.run(scenario())


def test_a_request_waiting_for_the_busy_candidate_replica_is_answered_by_production_once_it_dies(tmp_path) -> None:
    """A canary request queued behind another on the candidate's only replica: when that replica
    dies, production answers it at once (a reroute), not after request_timeout_s of waiting for a
    replacement that is still starting, or for a candidate a rollback has already stopped."""
    async def scenario() -> None:
        ep, backend, _ = canary_endpoint(tmp_path, 100)  # request_timeout_s 30
        await ready_replica(ep, backend, "serve", 1)
        candidate = await ready_replica(ep, backend, "candidate", 2)
        candidate.busy = True  # another request holds it
        request = one_row({"a": "long"}, {"a": 1})
        waiting = asyncio.create_task(ep.answer(request, request.to_body(), hold_s=None))
        await asyncio.sleep(0.2)
        assert not waiting.done() and ep.pool.waiting == 1  # queued for the candidate's replica
        backend.states[candidate.replica_id] = ReplicaStatus("failed", "killed")
        await ep.health.check()  # the health pass drops it and starts a replacement
        assert ep.pool.of("candidate", "starting") and not ep.pool.of("candidate", "ready")
        reply = await asyncio.wait_for(waiting, timeout=5)
        assert reply.status == 200 and reply.payload["model_version"] == 1
        assert nonzero(ep.candidates.canary.counts()) == {"candidate_rerouted": 1, "candidate_replica_deaths": 1}

    asyncio.run(scenario())


def test_a_production_replica_that_died_is_rerouted_and_counts_for_neither_side(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = canary_endpoint(tmp_path, 1)  # request 0 is not in a 1% share
        await ready_replica(ep, backend, "serve", 1, listen=False)  # the quietest: asked first, and dead
        await ready_replica(ep, backend, "serve", 1)
        request = one_row({"a": "long"}, {"a": 1})
        reply = await ep.answer(request, request.to_body(), hold_s=None)
        assert reply.status == 200 and reply.payload["model_version"] == 1
        assert nonzero(ep.candidates.canary.counts()) == {"production_rerouted": 1}

    asyncio.run(scenario())


@pytest.mark.parametrize(("serve", "counted"), [({"status": 500}, "a model error"),
                                                ({"delay_s": 1.0}, "over request_timeout_s 0.2")])
def test_a_candidate_that_answers_badly_is_charged_and_production_answers(tmp_path, serve, counted) -> None:
    async def scenario() -> None:
        ep, backend, _ = canary_endpoint(tmp_path, 100, request_timeout_s=0.2)
        await ready_replica(ep, backend, "serve", 1)
        await ready_replica(ep, backend, "candidate", 2, **serve)
        request = one_row({"a": "long"}, {"a": 1})
        reply = await ep.answer(request, request.to_body(), hold_s=None)
        assert reply.status == 200 and reply.payload["model_version"] == 1, counted
        assert nonzero(ep.candidates.canary.counts()) == {"candidate_requests": 1, "candidate_failures": 1}

    asyncio.run(scenario())


def test_a_candidate_replica_that_dies_is_replaced_and_one_that_keeps_dying_is_rolled_back(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = canary_endpoint(tmp_path, 50)
        await ready_replica(ep, backend, "serve", 1)
        for death in range(1, MAX_CANDIDATE_DEATHS + 1):
            [replica] = ep.pool.of("candidate") or [await ready_replica(ep, backend, "candidate", 2)]
            backend.states[replica.replica_id] = ReplicaStatus("failed", "process exited with code -9")
            await ep.health.check()
            if death < MAX_CANDIDATE_DEATHS:  # replaced at once, and the canary goes on
                [replacement] = ep.pool.of("candidate")
                assert replacement.state == "starting" and replacement.replica_id != replica.replica_id
                assert ep.candidates.canary is not None and state.events("ml.canary.rollback") == []
        [rollback] = [e.detail for e in state.events("ml.canary.rollback")]
        assert rollback["reason"] == ("candidate replicas died 3 times in 600 s against production 0: at least 3 "
                                      "deaths, more than production")
        assert rollback["candidate_replica_deaths"] == 3 and rollback["candidate_requests"] == 0
        assert ep.candidates.candidate is None and ep.pool.of("candidate") == []

    asyncio.run(scenario())


def test_killed_replicas_charge_neither_side_and_a_candidate_that_keeps_dying_is_rolled_back(
        candidate_endpoint, trained: Trained) -> None:
    """Kill -9 the production replica, then the candidate's: callers see only 200s and neither side is
    charged a failure; the candidate's replica is replaced, and only its third death rolls it back."""
    ep = candidate_endpoint
    started = ep.client.post("/canary", json={"version": 2, "share_percent": 50})
    assert started.status_code == 200, started.text
    status = ep.wait_for(lambda s: bool(ready_replicas(s, "candidate")), what="the candidate replica")
    runtime = LocalRuntime(ep.home)
    request = trained.requests.head(1)
    want = {1: expected_rows(chain_of(runtime, 1), request), 2: expected_rows(chain_of(runtime, 2), request)}
    rows = records(request, trained.input_columns)
    answers = [ep.score(rows).json() for _ in range(10)]
    assert sorted(a["model_version"] for a in answers) == [1] * 5 + [2] * 5  # 50%, answered for real
    codes: list[int] = []
    stop = threading.Event()

    def client_loop() -> None:
        with httpx.Client(base_url=ep.address, headers={"Authorization": f"Bearer {ep.token}"}, timeout=120) as c:
            while not stop.is_set():
                resp = c.post("/invocations", json={"dataframe_records": rows})
                codes.append(resp.status_code)
                if resp.status_code == 200:
                    assert_same_answers(resp.json()["predictions"], want[resp.json()["model_version"]])

    def kill(role: str, *, ready: bool = True) -> None:  # ready=False: a starting replica dies too
        def victims(s: dict) -> list[dict]:  # type: ignore[type-arg]
            return ready_replicas(s, role) if ready else [c for c in s["replicas"] if c["role"] == role and c["pid"]]

        victim = victims(ep.wait_for(lambda s: bool(victims(s)), what=f"a {role} replica"))[0]
        os.kill(victim["pid"], signal.SIGKILL)
        ep.wait_for(lambda s: victim["replica_id"] not in [c["replica_id"] for c in s["replicas"]],
                    what=f"the killed {role} replica dropped")

    threads = [threading.Thread(target=client_loop) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        kill("serve")
        kill("candidate")
        status = ep.wait_for(lambda s: bool(ready_replicas(s, "candidate")), what="the candidate's replacement")
        canary = status["canary"]
        assert canary is not None and ep.events("ml.canary.rollback") == []  # a healthy candidate stays
        assert (canary["candidate_failures"], canary["production_failures"]) == (0, 0)
        assert (canary["candidate_replica_deaths"], canary["production_replica_deaths"]) == (1, 1)
        before = len(codes)
        while len(codes) < before + 10:  # the replacement answers its share again
            time.sleep(0.05)
        kill("candidate", ready=False)
        kill("candidate", ready=False)
        ep.wait_for(lambda s: s["canary"] is None, what="the rollback")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert codes and set(codes) == {200}  # no caller saw a replica die
    [rollback] = [e.detail for e in ep.events("ml.canary.rollback")]
    assert rollback["reason"] == ("candidate replicas died 3 times in 600 s against production 1: at least 3 "
                                  "deaths, more than production")
    assert (rollback["candidate_failures"], rollback["production_failures"]) == (0, 0)
    status = ep.status()
    assert status["candidate_version"] is None and status["last_rollback"]["reason"] == rollback["reason"]
    assert {ep.score(rows).json()["model_version"] for _ in range(4)} == {1}


def test_a_canary_is_not_charged_for_requests_that_arrived_while_its_replica_started(candidate_endpoint,
                                                                                  trained: Trained) -> None:
    """Issue 12: requests routed to the candidate while its replica was still starting counted as its
    failures, and a healthy canary was rolled back after 7 s ("failed 100 of 100")."""
    ep = candidate_endpoint
    rollbacks_before = len(ep.events("ml.canary.rollback"))
    rows = records(trained.requests.head(1), trained.input_columns)
    runtime = LocalRuntime(ep.home)
    want = {1: expected_rows(chain_of(runtime, 1), trained.requests.head(1)),
            2: expected_rows(chain_of(runtime, 2), trained.requests.head(1))}
    ep.client.delete("/canary")  # start from no candidate: its replica starts under the load below
    ep.wait_for(lambda s: not [c for c in s["replicas"] if c["role"] == "candidate"], what="no candidate replica")
    answers: list[tuple[int, int]] = []
    stop = threading.Event()

    def client_loop() -> None:
        with httpx.Client(base_url=ep.address, headers={"Authorization": f"Bearer {ep.token}"}, timeout=120) as c:
            while not stop.is_set():
                resp = c.post("/invocations", json={"dataframe_records": rows})
                body = resp.json()
                answers.append((resp.status_code, body.get("model_version", 0)))
                if resp.status_code == 200:
                    assert_same_answers(body["predictions"], want[body["model_version"]])

    started = ep.client.post("/canary", json={"share_percent": 50, "version": 2})
    assert started.status_code == 200, started.text
    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        ep.wait_for(lambda s: bool(ready_replicas(s, "candidate")), what="the candidate replica")
        deadline = time.monotonic() + 60
        while sum(v == 2 for _, v in answers) < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert {code for code, _ in answers} == {200}
    assert sum(v == 2 for _, v in answers) >= 20  # the candidate answered for real once it was ready
    status = ep.status()
    assert len(ep.events("ml.canary.rollback")) == rollbacks_before  # not rolled back
    assert status["canary"] is not None and status["canary"]["candidate_failures"] == 0
    assert status["canary"]["candidate_requests"] == sum(v == 2 for _, v in answers)
    assert ep.client.delete("/canary").status_code == 200
