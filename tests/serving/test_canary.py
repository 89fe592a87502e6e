"""Canary share and rollback rule, then a real canary whose copy is killed: rolled back and audited."""

from __future__ import annotations

import os
import signal
import time

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
