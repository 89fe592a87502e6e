"""The scaling decision with synthetic counters, then scale to zero and back on a real endpoint."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace

import pytest
from serving_helpers import Trained, launch, ready_replicas, records

from lakescore.serving.policy.scaler import ScaleInput, decide, rate_per_minute

BASE = ScaleInput(now=1000.0, replicas=1, min_replicas=1, max_replicas=4, signal="request_rate", requests_per_min=0.0,
                  pending_per_replica=0.0, target_rpm=120.0, target_pending=1.5, cooldown_s=180.0, idle_s=0.0,
                  idle_timeout_s=1800.0, keep_warm=False)


def run_passes(inp: ScaleInput, counts: list[int], interval_s: float) -> list[int]:
    """Feed counter readings one pass apart; return the replica count after each pass."""
    replicas, out, low_since, last_up = inp.replicas, [], None, None
    for i in range(1, len(counts)):
        now = inp.now + i * interval_s
        d = decide(replace(inp, now=now, replicas=replicas, low_since=low_since, last_up_at=last_up,
                           requests_per_min=rate_per_minute(counts[i - 1], counts[i], interval_s)))
        if d.action == "up":
            last_up = now
        replicas, low_since = d.replicas_after, d.low_since
        out.append(replicas)
    return out


def test_rate_comes_from_the_counter_change() -> None:
    assert rate_per_minute(1000, 1600, 60.0) == 600.0
    assert rate_per_minute(5, 5, 60.0) == 0.0


def test_scale_up_adds_exactly_one_replica_per_pass_up_to_max() -> None:
    # 600 requests/min against 120 per replica: 5 replicas' worth, but one replica per pass, capped at 4.
    counts = [i * 600 for i in range(7)]
    assert run_passes(BASE, counts, 60.0) == [2, 3, 4, 4, 4, 4]


def test_up_at_once_without_cooldown_and_reason_in_words() -> None:
    d = decide(replace(BASE, requests_per_min=121.0, last_up_at=999.0))
    assert (d.action, d.replicas_before, d.replicas_after) == ("up", 1, 2)
    assert d.reason == "scaled up from 1 replica to 2: 121.0 requests/min is above the target of 120 per replica"


def test_a_pass_woken_right_after_a_start_at_zero_starts_no_second_replica() -> None:
    zero = replace(BASE, replicas=0, min_replicas=0, max_replicas=3, interval_s=10.0)
    first = decide(replace(zero, waiting_at_zero=20))  # a burst at zero replicas: the start is this pass
    assert (first.action, first.replicas_after) == ("up", 1)
    woken = decide(replace(zero, now=1000.1, replicas=1, requests_per_min=126.3, last_up_at=1000.0))
    assert (woken.action, woken.replicas_after) == ("hold", 1)
    assert woken.reason == ("126.3 requests/min is above the target for 1 replica, but a replica was started 0.1 s ago: "
                            "the next start waits scale_interval_s 10 to see what that one bought")
    later = decide(replace(zero, now=1010.0, replicas=1, requests_per_min=126.3, last_up_at=1000.0))
    assert (later.action, later.replicas_after) == ("up", 2)


def test_scale_down_waits_for_the_cooldown_and_needs_80_percent_with_one_fewer() -> None:
    three = replace(BASE, replicas=3)
    # 190/min would be 79% of 2 replicas' 240: low enough, but only after 180 s of staying low.
    first = decide(replace(three, requests_per_min=190.0))
    assert first.action == "hold" and first.low_since == 1000.0
    early = decide(replace(three, now=1179.0, requests_per_min=190.0, low_since=first.low_since))
    assert early.action == "hold"
    late = decide(replace(three, now=1180.0, requests_per_min=190.0, low_since=first.low_since))
    assert (late.action, late.replicas_after) == ("down", 2)
    # 193/min is 80.4% of 240: stays at 3, and the clock resets.
    assert decide(replace(three, now=1180.0, requests_per_min=193.0, low_since=1000.0)).low_since is None
    # Never below replicas.min through the rate rule.
    assert decide(replace(BASE, now=5000.0, low_since=0.0)).action == "hold"


def test_pending_signal_scales_above_one_and_a_half_per_replica() -> None:
    pending = replace(BASE, signal="pending_requests", replicas=2)
    assert decide(replace(pending, pending_per_replica=1.6)).replicas_after == 3
    assert decide(replace(pending, pending_per_replica=1.5)).action == "hold"


def test_idle_timeout_takes_the_endpoint_to_zero_and_a_request_brings_one_back() -> None:
    idle = decide(replace(BASE, replicas=2, idle_s=1800.0))
    assert (idle.action, idle.replicas_after, idle.idle_stopped) == ("down", 0, True)
    asleep = decide(replace(BASE, replicas=0, idle_s=2000.0, idle_stopped=True))
    assert asleep.action == "hold"  # below replicas.min, but asleep until a request comes
    woken = decide(replace(BASE, replicas=0, idle_s=0.0, idle_stopped=True, waiting_at_zero=1))
    assert (woken.action, woken.replicas_after, woken.idle_stopped) == ("up", 1, False)
    assert decide(replace(BASE, replicas=2, idle_s=10**6, keep_warm=True)).action == "hold"


def test_min_zero_starts_a_replica_only_when_a_request_arrives() -> None:
    zero = replace(BASE, replicas=0, min_replicas=0)
    assert decide(zero).action == "hold"
    assert decide(replace(zero, waiting_at_zero=3)).replicas_after == 1


@pytest.fixture(scope="module")
def zero_endpoint(module_home, trained: Trained):
    home, config = module_home
    endpoint = launch(home, config, endpoint_name="elastic", replicas={"min": 0, "max": 2},
                      target_rpm_per_replica=30, scale_interval_s=1, scale_down_cooldown_s=1,
                      idle_timeout_s=4, record_flush_interval_s=1, retry_after_s=7)
    try:
        yield endpoint
    finally:
        endpoint.stop()


def test_scale_to_zero_and_back(zero_endpoint, trained: Trained) -> None:
    ep = zero_endpoint
    rows = records(trained.requests.head(1), trained.input_columns)
    assert ep.status()["state"] == "scaled to zero"
    refused = ep.score(rows, headers={"X-Scale-Up-Timeout": "0"})  # asks not to wait: 503 at once, a replica starts
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "7"  # no replica start measured yet: retry_after_s
    assert "X-Scale-Up-Timeout" in refused.json()["message"]
    # The refused request alone starts the replica. (Sent at once, the next request can reach the endpoint
    # before the scale pass the refusal kicked, and arrive at zero replicas too: seen on a loaded CI machine.)
    ep.wait_for(lambda s: s["replicas"], what="the replica the refused request started", timeout_s=30)
    held = ep.score(rows)  # without the header: waits in the queue until the replica is ready
    assert held.status_code == 200 and held.json()["served"] == "warm"

    # Load above 30 requests/min per replica: the scaler adds exactly one replica per pass, up to max 2.
    deadline = time.monotonic() + 90
    while len(ready_replicas(ep.status())) < 2 and time.monotonic() < deadline:
        assert ep.score(rows).status_code == 200
    assert len(ready_replicas(ep.status())) == 2
    ups = [e.detail for e in ep.events("ml.scale") if e.detail["action"] == "up"]
    assert (ups[0]["replicas_before"], ups[0]["replicas_after"]) == (0, 1)
    assert ups[0]["reason"] == "scaled up from 0 replicas to 1: 1 request(s) arrived at zero replicas"  # the refused one
    assert all(u["replicas_after"] - u["replicas_before"] == 1 for u in ups)  # one replica per pass
    assert max(u["replicas_after"] for u in ups) == 2  # never above replicas.max
    by_rate = [u for u in ups if "above the target of 30 per replica" in u["reason"]]
    assert by_rate and all(u["requests_per_min"] > 30 for u in by_rate)

    # Quiet: down one replica after the cooldown, then to zero after idle_timeout_s.
    ep.wait_for(lambda s: s["state"] == "scaled to zero", what="scale to zero", timeout_s=60)
    downs = [(e.detail["replicas_before"], e.detail["replicas_after"]) for e in ep.events("ml.scale")
             if e.detail["action"] == "down"]
    assert downs[-1][1] == 0 and all(b - a == 1 for b, a in downs[:-1])
    starts = ep.status()["measured_starts_s"]
    assert len(starts) >= 2 and all(0 < s < 60 for s in starts)
    again = ep.score(rows, headers={"X-Scale-Up-Timeout": "0"})
    assert again.status_code == 503  # Retry-After from the measured starts now, not retry_after_s
    assert again.headers["retry-after"] == str(max(1, math.ceil(statistics.median(starts))))
