"""The replica pool: the quietest-replica rule, the bounded queue of requests waiting for a replica, and
Retry-After from measured replica starts."""

from __future__ import annotations

import asyncio

import pytest

from lakescore.errors import EndpointUnavailableError
from lakescore.serving.replicas.pool import Replica, ReplicaPool, StartTimes, quietest, to_stop


def replica(name: str, *, state: str = "ready", last_done: float = 0.0, busy: bool = False,
         started_at: float = 0.0) -> Replica:
    return Replica(name, 1, "serve", f"http://127.0.0.1/{name}", state=state, last_done=last_done, busy=busy,
                started_at=started_at)


def test_requests_go_to_the_idle_replica_that_waited_longest() -> None:
    replicas = [replica("a", last_done=30.0), replica("b", last_done=10.0, busy=True), replica("c", last_done=20.0),
              replica("d", state="starting", last_done=0.0), replica("e", state="draining", last_done=1.0)]
    assert quietest(replicas).replica_id == "c"
    assert quietest([replicas[1], replicas[3]]) is None


def test_scale_down_stops_the_same_quietest_replica_or_a_starting_one_first() -> None:
    ready = [replica("a", last_done=30.0), replica("c", last_done=20.0)]
    assert to_stop(ready).replica_id == "c"
    assert to_stop([*ready, replica("n", state="starting", started_at=50.0)]).replica_id == "n"
    busy = [replica("a", last_done=30.0, busy=True), replica("c", last_done=20.0, busy=True)]
    assert to_stop(busy).replica_id == "c"


def test_a_waiting_request_gets_the_replica_released_to_it() -> None:
    async def scenario() -> tuple[str, int]:
        pool = ReplicaPool(max_queue=2, retry_after_s=5)
        pool.replicas["a"] = replica("a")
        first = await pool.acquire("serve", wait_s=1)
        waiter = asyncio.create_task(pool.acquire("serve", wait_s=5))
        await asyncio.sleep(0.05)
        assert pool.waiting == 1
        await pool.release(first)
        second = await waiter
        return second.replica_id, second.requests

    assert scenario_result(scenario()) == ("a", 1)


def test_a_full_queue_is_refused_with_503_and_a_slow_replica_times_out() -> None:
    async def scenario() -> None:
        pool = ReplicaPool(max_queue=1, retry_after_s=9)
        pool.replicas["a"] = replica("a", busy=True)
        waiter = asyncio.create_task(pool.acquire("serve", wait_s=0.3))
        await asyncio.sleep(0.05)
        with pytest.raises(EndpointUnavailableError) as caught:
            await pool.acquire("serve", wait_s=1)
        assert caught.value.http_status == 503 and caught.value.fields["retry_after_s"] == 9
        assert "max_queue 1" in str(caught.value)
        assert await waiter is None  # nobody released the busy replica in time
        assert pool.waiting == 0

    scenario_result(scenario())


def test_retry_after_is_the_ceiling_of_the_median_of_the_last_five_starts() -> None:
    starts = StartTimes(30)
    assert starts.retry_after_s == 30  # nothing measured: retry_after_s from serving.yml
    starts.record(1.4)
    assert starts.retry_after_s == 2
    for seconds in (0.2, 0.3):
        starts.record(seconds)
    assert starts.retry_after_s == 1  # median 0.3 s: at least 1 s
    for seconds in (5.1, 5.2, 5.3):
        starts.record(seconds)
    assert starts.retry_after_s == 6  # 1.4 fell out; median of 0.2, 0.3, 5.1, 5.2, 5.3 is 5.1


def test_only_a_first_readiness_is_a_measured_start() -> None:
    async def scenario() -> tuple[list[float], str]:
        pool = ReplicaPool(max_queue=1, retry_after_s=30)
        fresh = replica("a", state="starting", started_at=100.0)
        await pool.mark_ready(fresh, now=102.5)
        back = replica("b", state="failed", started_at=0.0)
        back.requests = 7
        await pool.mark_ready(back, now=500.0)  # a replica that did not answer is ready again: no start
        return list(pool.starts.measured), back.state

    assert scenario_result(scenario()) == ([2.5], "ready")
    assert ReplicaPool(max_queue=1, retry_after_s=30).retry_after_s == 30


def test_a_waiting_request_gives_up_when_told_and_a_failed_replica_takes_none() -> None:
    async def scenario() -> tuple[object, float]:
        pool = ReplicaPool(max_queue=2, retry_after_s=5)
        pool.replicas["s"] = replica("s", state="starting")
        pool.replicas["f"] = replica("f", state="failed")
        gone = [False]
        began = asyncio.get_running_loop().time()
        waiter = asyncio.create_task(pool.acquire("serve", wait_s=5, give_up=lambda: gone[0]))
        await asyncio.sleep(0.05)
        gone[0] = True
        await pool.changed()
        return await waiter, asyncio.get_running_loop().time() - began

    got, waited = scenario_result(scenario())
    assert got is None and waited < 1


def test_a_replica_given_back_unused_counts_no_request_and_wakes_a_waiter() -> None:
    async def scenario() -> tuple[int, float, str]:
        pool = ReplicaPool(max_queue=2, retry_after_s=5)
        pool.replicas["a"] = replica("a", last_done=3.0)
        taken = await pool.acquire("serve", wait_s=0)
        waiter = asyncio.create_task(pool.acquire("serve", wait_s=5))
        await asyncio.sleep(0.05)
        await pool.release(taken, used=False)
        got = await waiter
        return got.requests, got.last_done, got.replica_id

    assert scenario_result(scenario()) == (0, 3.0, "a")


def scenario_result(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout=10))
