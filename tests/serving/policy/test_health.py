"""The health pass over replicas with scripted states: replicas that grow over ``memory_limit_mb`` are
replaced by the scaler (within ``replicas.max``) and those over it from the start are said once,
replicas that fail to start back off, a replica retired mid-pass is not failed, a replica that fails
``MAX_REPLICA_STRIKES`` requests in a row is replaced, and a deploy's failed replica is named as one."""

from __future__ import annotations

import asyncio

import pytest
from serving_fakes import fake_endpoint, one_row

from lakescore.errors import EndpointUnavailableError
from lakescore.serving.policy.health import MAX_REPLICA_STRIKES, MEMORY_SETTLE_S
from lakescore.serving.replicas.backend import ReplicaStatus


def test_a_replica_that_grows_over_memory_limit_mb_is_replaced_by_the_scaler_within_replicas_max(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, memory_limit_mb=100, replicas={"min": 1, "max": 1})
        first = await ep._start_replica("serve", 1)
        backend.states[first.replica_id] = ReplicaStatus("ready", rss_bytes=90 * 2**20, pid=None)
        await ep.health.check()
        assert first.state == "ready" and ep.status()["replicas"][0]["resident_mb"] == 90.0
        first.ready_at -= MEMORY_SETTLE_S + 1  # it grew after its first minute: a leak, not the version's size
        backend.states[first.replica_id] = ReplicaStatus("ready", rss_bytes=101 * 2**20)
        await ep.health.check()
        assert backend.stopped == [first.replica_id] and len(backend.started) == 1  # the health pass starts none
        [event] = [e.detail for e in state.events("ml.replica.replaced")]
        assert event == {"replica_id": first.replica_id, "memory_mb": 101.0, "measured": "resident", "memory_limit_mb": 100}
        # A request arrives while the replacement starts: the scaler, the one place serve replicas start,
        # starts one replica and holds at replicas.max 1 on the next pass.
        ep.autoscaler.demand()
        up = await ep.autoscaler.scale_pass()
        assert (up.action, up.replicas_after) == ("up", 1) and len(backend.started) == 2
        ep.autoscaler.demand()
        ep.pool.waiting = 3
        held = await ep.autoscaler.scale_pass()
        assert held.action == "hold" and len(backend.started) == 2 and len(ep.autoscaler.live()) == 1

    asyncio.run(scenario())


def test_a_replica_over_memory_limit_mb_as_soon_as_it_is_ready_is_said_once_and_kept(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, memory_limit_mb=100, replicas={"min": 1, "max": 1})
        first = await ep._start_replica("serve", 1)
        backend.states[first.replica_id] = ReplicaStatus("ready", pss_bytes=112 * 2**20, rss_bytes=200 * 2**20)
        for _ in range(5):
            await ep.health.check()
            await ep.autoscaler.scale_pass()
        assert backend.started == [first.replica_id] and backend.stopped == [] and first.state == "ready"
        assert state.events("ml.replica.replaced") == []
        [event] = [e.detail for e in state.events("ml.replica.memory_limit")]
        assert (event["version"], event["memory_mb"], event["measured"]) == (1, 112.0, "proportional")
        note = ep.status()["memory_limit_note"]
        assert note.startswith("a replica of v1 holds 112.0 MB (proportional) 0 s after it became ready, above "
                               "memory_limit_mb 100")
        assert note.endswith("raise memory_limit_mb to at least 140")  # 112 * 1.25
        second = await ep._start_replica("serve", 1)  # another replica of the same version: not said again
        backend.states[second.replica_id] = ReplicaStatus("ready", pss_bytes=113 * 2**20)
        await ep.health.check()
        await ep.health.check()
        assert len(state.events("ml.replica.memory_limit")) == 1

    asyncio.run(scenario())


def test_replicas_that_fail_to_start_are_retried_with_backoff(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path)
        await ep.autoscaler.scale_pass()  # below replicas.min 1: start one
        backend.states[backend.started[0]] = ReplicaStatus("failed", "model did not load: CertificateError: x")
        await ep.health.check()
        assert ep.autoscaler.live() == [] and ep.autoscaler.start_failures == 1
        assert [e.detail["detail"] for e in state.events("ml.replica.failed")] == ["model did not load: CertificateError: x"]
        held = await ep.autoscaler.scale_pass()
        assert held.action == "hold" and "1 replicas failed to start in a row" in held.reason
        assert "CertificateError: x" in held.reason and len(backend.started) == 1
        assert ep.status()["state"] == "down"

    asyncio.run(scenario())


def test_a_replica_retired_while_the_health_pass_reads_another_is_not_failed(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, replicas={"min": 0, "max": 2})
        first, second = await ep._start_replica("serve", 1), await ep._start_replica("serve", 1)

        def scaler_retires_second(replica_id: str) -> None:  # while the pass awaits the first replica's status
            if replica_id == first.replica_id:
                ep.pool.replicas.pop(second.replica_id)
                backend.states.pop(second.replica_id)

        backend.on_status = scaler_retires_second
        await ep.health.check()
        assert state.events("ml.replica.failed") == [] and ep.counts["replicas_failed"] == 0
        assert ep.autoscaler.start_failures == 0 and ep.autoscaler.last_failure == ""

    asyncio.run(scenario())


def test_a_failed_replica_is_asked_again_and_replaced_after_failing_in_a_row(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path)
        replica = await ep._start_replica("serve", 1)  # nothing listens on its socket: every request fails
        backend.states[replica.replica_id] = ReplicaStatus("ready")
        request = one_row({"a": "long"}, {"a": 1})
        for strike in range(1, MAX_REPLICA_STRIKES + 1):
            await ep.health.check()
            assert replica.state == "ready" and backend.fresh == [replica.replica_id] * (strike - 1)
            with pytest.raises(EndpointUnavailableError):
                await ep.answer(request, request.to_body(), hold_s=0)
            assert (replica.state, replica.strikes) == ("failed", strike) and "replica at" in replica.detail
        await ep.health.check()  # answers its health check again, but failed 3 requests in a row
        assert replica.replica_id not in ep.pool.replicas and backend.stopped == [replica.replica_id]
        [failed] = [e.detail for e in state.events("ml.replica.failed")]
        assert failed["detail"].startswith(f"failed {MAX_REPLICA_STRIKES} requests in a row (replica at ")

    asyncio.run(scenario())


def test_a_failed_deploy_replica_is_named_as_one(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)
        replica = await ep._start_replica("next", 2)
        backend.states[replica.replica_id] = ReplicaStatus("failed", "model did not load")
        await ep.health.check()
        assert ep.candidates.note == ""
        assert ep.autoscaler.last_failure == f"next replica {replica.replica_id}: model did not load"

    asyncio.run(scenario())

