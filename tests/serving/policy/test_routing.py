"""Where a request goes: every rule of ``routing.route`` on hand-written snapshots (no HTTP)."""

from __future__ import annotations

import pytest

from lakescore.serving.policy.routing import Route, Snapshot, route


@pytest.mark.parametrize(("snap", "want"), [
    # 1. another version: the live canary's candidate when its replica is ready, else cold
    (Snapshot(other_version=True, idle=2, ready=2), Route.COLD),
    (Snapshot(other_version=True, asks_candidate=True, candidate_replica="ready", idle=1, ready=1), Route.CANDIDATE),
    (Snapshot(other_version=True, asks_candidate=True, candidate_replica="starting", idle=1, ready=1), Route.COLD),
    (Snapshot(other_version=True, asks_candidate=False, candidate_replica="ready"), Route.COLD),
])
def test_another_version_goes_to_its_replica_or_the_cold_path(snap: Snapshot, want: Route) -> None:
    assert route(snap) is want


def test_a_canary_request_waits_for_nothing_while_the_candidate_starts() -> None:
    picked = Snapshot(canary_pick=True, idle=1, ready=1)
    assert route(Snapshot(canary_pick=True, candidate_replica="ready", idle=1, ready=1)) is Route.CANDIDATE
    # Starting: production answers, the candidate is not charged (it could not have answered).
    assert route(Snapshot(canary_pick=True, candidate_replica="starting", idle=1, ready=1)) is Route.WARM
    assert route(Snapshot(canary_pick=True, candidate_replica="starting", ready=0, starting=1)) is Route.HOLD
    # Gone (its replica failed): the candidate is charged; production then answers.
    assert route(picked) is Route.CANDIDATE
    assert route(Snapshot(candidate_replica="ready", idle=1, ready=1)) is Route.WARM  # not in the share


def test_an_idle_ready_replica_answers_at_once_even_with_others_waiting() -> None:
    assert route(Snapshot(idle=1, ready=3, starting=1, waiting=64, max_queue=64)) is Route.WARM


def test_busy_ready_replicas_queue_the_request_until_the_queue_is_full() -> None:
    assert route(Snapshot(idle=0, ready=2, waiting=63, max_queue=64)) is Route.QUEUE
    assert route(Snapshot(idle=0, ready=2, waiting=64, max_queue=64)) is Route.REJECT
    assert route(Snapshot(idle=0, ready=2, max_queue=0)) is Route.REJECT  # max_queue 0: nobody waits
    assert route(Snapshot(idle=0, ready=2, hold_s=0)) is Route.QUEUE  # the header is about starts only


@pytest.mark.parametrize(("snap", "want"), [
    (Snapshot(starting=1), Route.HOLD),  # replicas start: wait for them, not the cold path
    (Snapshot(starting=0, can_start=True), Route.HOLD),  # zero replicas, a start is triggered
    (Snapshot(starting=1, can_start=False), Route.HOLD),  # a replica still starts during a backoff
    (Snapshot(starting=2, hold_s=90), Route.HOLD),
    (Snapshot(starting=1, waiting=10, max_queue=10), Route.REJECT),  # the queue is full
    (Snapshot(starting=0, hold_s=0), Route.REJECT),  # X-Scale-Up-Timeout: 0 asks not to wait
])
def test_while_replicas_start_requests_wait_in_the_queue(snap: Snapshot, want: Route) -> None:
    assert route(snap) is want


def test_no_replica_alive_and_none_can_start_goes_cold() -> None:
    assert route(Snapshot(starting=0, can_start=False)) is Route.COLD
    assert route(Snapshot(starting=0, can_start=False, hold_s=0, waiting=5, max_queue=5)) is Route.COLD
