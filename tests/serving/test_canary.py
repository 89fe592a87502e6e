"""Canary share and rollback rule, then a real canary whose copy is killed (rolled back and
audited), and one whose copy starts under load (not charged for the requests it could not take)."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx

import pytest

from lakescore.runtime import LocalRuntime
from lakescore.serving.canary import CanaryWindow, goes_to_canary, rollback_reason
from serving_helpers import Trained, assert_same_answers, chain_of, expected_rows, ready_copies, records


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
    window.record("candidate", failed=True, now=0.0)
    window.record("production", failed=False, now=30.0)
    window.record("candidate", failed=False, now=61.0)
    assert window.counts() == {"candidate_requests": 1, "candidate_failures": 0,
                               "production_requests": 1, "production_failures": 0}


def test_a_failing_canary_is_rolled_back_and_audited(candidate_endpoint, trained: Trained) -> None:
    ep = candidate_endpoint
    started = ep.client.post("/canary", json={"version": 2, "share_percent": 50})
    assert started.status_code == 200, started.text
    status = ep.wait_for(lambda s: bool(ready_copies(s, "candidate")), what="the candidate copy")
    candidate = ready_copies(status, "candidate")[0]
    runtime = LocalRuntime(ep.home)
    request = trained.requests.head(1)
    v1, v2 = expected_rows(chain_of(runtime, 1), request), expected_rows(chain_of(runtime, 2), request)
    rows = records(request, trained.input_columns)

    answers = [ep.score(rows).json() for _ in range(10)]
    assert sorted(a["model_version"] for a in answers) == [1] * 5 + [2] * 5  # 50%, answered for real
    for a in answers:
        assert_same_answers(a["predictions"], v2 if a["model_version"] == 2 else v1)

    os.kill(candidate["pid"], signal.SIGKILL)  # the injected failure
    codes, deadline = [], time.monotonic() + 60
    while not ep.events("ml.canary.rollback") and time.monotonic() < deadline and len(codes) < 40:
        reply = ep.score(rows)
        codes.append(reply.status_code)
        assert reply.json()["model_version"] == 1  # production answered instead
    assert codes and set(codes) == {200}  # no request failed
    rollback = [e.detail for e in ep.events("ml.canary.rollback")]
    assert len(rollback) == 1
    assert rollback[0]["candidate_requests"] >= 6 and rollback[0]["candidate_failures"] >= 2
    assert rollback[0]["production_failures"] == 0
    assert rollback[0]["reason"].startswith(f"candidate failed {rollback[0]['candidate_failures']} of "
                                            f"{rollback[0]['candidate_requests']} requests")
    status = ep.status()
    assert status["canary"] is None and status["candidate_version"] is None
    assert status["last_rollback"]["reason"] == rollback[0]["reason"]
    assert {ep.score(rows).json()["model_version"] for _ in range(4)} == {1}


def test_a_canary_is_not_charged_for_requests_that_arrived_while_its_copy_started(candidate_endpoint,
                                                                                  trained: Trained) -> None:
    """Issue 12: requests routed to the candidate while its copy was still starting counted as its
    failures, and a healthy canary was rolled back after 7 s ("failed 100 of 100")."""
    ep = candidate_endpoint
    rollbacks_before = len(ep.events("ml.canary.rollback"))
    rows = records(trained.requests.head(1), trained.input_columns)
    runtime = LocalRuntime(ep.home)
    want = {1: expected_rows(chain_of(runtime, 1), trained.requests.head(1)),
            2: expected_rows(chain_of(runtime, 2), trained.requests.head(1))}
    ep.client.delete("/canary")  # start from no candidate: its copy starts under the load below
    ep.wait_for(lambda s: not [c for c in s["copies"] if c["role"] == "candidate"], what="no candidate copy")
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
        ep.wait_for(lambda s: bool(ready_copies(s, "candidate")), what="the candidate copy")
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
