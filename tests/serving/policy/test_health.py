"""The health pass over copies with scripted states: copies that grow over ``memory_limit_mb`` are
replaced by the scaler (within ``replicas.max``) and those over it from the start are said once,
copies that fail to start back off, a copy retired mid-pass is not failed, a copy that fails
``MAX_COPY_STRIKES`` requests in a row is replaced, and a deploy's failed copy is named as one."""

from __future__ import annotations

import asyncio

import pytest

from lakescore.errors import EndpointUnavailableError
from lakescore.serving.replicas.backend import CopyStatus
from lakescore.serving.policy.health import MAX_COPY_STRIKES, MEMORY_SETTLE_S
from serving_fakes import fake_endpoint, one_row


def test_a_copy_that_grows_over_memory_limit_mb_is_replaced_by_the_scaler_within_replicas_max(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, memory_limit_mb=100, replicas={"min": 1, "max": 1})
        first = await ep._start_copy("serve", 1)
        backend.states[first.copy_id] = CopyStatus("ready", rss_bytes=90 * 2**20, pid=None)
        await ep.health.check()
        assert first.state == "ready" and ep.status()["copies"][0]["resident_mb"] == 90.0
        first.ready_at -= MEMORY_SETTLE_S + 1  # it grew after its first minute: a leak, not the version's size
        backend.states[first.copy_id] = CopyStatus("ready", rss_bytes=101 * 2**20)
        await ep.health.check()
        assert backend.stopped == [first.copy_id] and len(backend.started) == 1  # the health pass starts none
        [event] = [e.detail for e in state.events("ml.copy.replaced")]
        assert event == {"copy_id": first.copy_id, "memory_mb": 101.0, "measured": "resident", "memory_limit_mb": 100}
        # A request arrives while the replacement starts: the scaler, the one place serve copies start,
        # starts one copy and holds at replicas.max 1 on the next pass.
        ep.autoscaler.demand()
        up = await ep.autoscaler.scale_pass()
        assert (up.action, up.copies_after) == ("up", 1) and len(backend.started) == 2
        ep.autoscaler.demand()
        ep.pool.waiting = 3
        held = await ep.autoscaler.scale_pass()
        assert held.action == "hold" and len(backend.started) == 2 and len(ep.autoscaler.live()) == 1

    asyncio.run(scenario())


def test_a_copy_over_memory_limit_mb_as_soon_as_it_is_ready_is_said_once_and_kept(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, memory_limit_mb=100, replicas={"min": 1, "max": 1})
        first = await ep._start_copy("serve", 1)
        backend.states[first.copy_id] = CopyStatus("ready", pss_bytes=112 * 2**20, rss_bytes=200 * 2**20)
        for _ in range(5):
            await ep.health.check()
            await ep.autoscaler.scale_pass()
        assert backend.started == [first.copy_id] and backend.stopped == [] and first.state == "ready"
        assert state.events("ml.copy.replaced") == []
        [event] = [e.detail for e in state.events("ml.copy.memory_limit")]
        assert (event["version"], event["memory_mb"], event["measured"]) == (1, 112.0, "proportional")
        note = ep.status()["memory_limit_note"]
        assert note.startswith("a copy of v1 holds 112.0 MB (proportional) 0 s after it became ready, above "
                               "memory_limit_mb 100")
        assert note.endswith("raise memory_limit_mb to at least 140")  # 112 * 1.25
        second = await ep._start_copy("serve", 1)  # another copy of the same version: not said again
        backend.states[second.copy_id] = CopyStatus("ready", pss_bytes=113 * 2**20)
        await ep.health.check()
        await ep.health.check()
        assert len(state.events("ml.copy.memory_limit")) == 1

    asyncio.run(scenario())


def test_copies_that_fail_to_start_are_retried_with_backoff(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path)
        await ep.autoscaler.scale_pass()  # below replicas.min 1: start one
        backend.states[backend.started[0]] = CopyStatus("failed", "model did not load: CertificateError: x")
        await ep.health.check()
        assert ep.autoscaler.live() == [] and ep.autoscaler.start_failures == 1
        assert [e.detail["detail"] for e in state.events("ml.copy.failed")] == ["model did not load: CertificateError: x"]
        held = await ep.autoscaler.scale_pass()
        assert held.action == "hold" and "1 copies failed to start in a row" in held.reason
        assert "CertificateError: x" in held.reason and len(backend.started) == 1
        assert ep.status()["state"] == "down"

    asyncio.run(scenario())


def test_a_copy_retired_while_the_health_pass_reads_another_is_not_failed(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, replicas={"min": 0, "max": 2})
        first, second = await ep._start_copy("serve", 1), await ep._start_copy("serve", 1)

        def scaler_retires_second(copy_id: str) -> None:  # while the pass awaits the first copy's status
            if copy_id == first.copy_id:
                ep.pool.copies.pop(second.copy_id)
                backend.states.pop(second.copy_id)

        backend.on_status = scaler_retires_second
        await ep.health.check()
        assert state.events("ml.copy.failed") == [] and ep.counts["copies_failed"] == 0
        assert ep.autoscaler.start_failures == 0 and ep.autoscaler.last_failure == ""

    asyncio.run(scenario())


def test_a_failed_copy_is_asked_again_and_replaced_after_failing_in_a_row(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path)
        copy = await ep._start_copy("serve", 1)  # nothing listens on its socket: every request fails
        backend.states[copy.copy_id] = CopyStatus("ready")
        request = one_row({"a": "long"}, {"a": 1})
        for strike in range(1, MAX_COPY_STRIKES + 1):
            await ep.health.check()
            assert copy.state == "ready" and backend.fresh == [copy.copy_id] * (strike - 1)
            with pytest.raises(EndpointUnavailableError):
                await ep.answer(request, request.to_body(), hold_s=0)
            assert (copy.state, copy.strikes) == ("failed", strike) and "copy at" in copy.detail
        await ep.health.check()  # answers its health check again, but failed 3 requests in a row
        assert copy.copy_id not in ep.pool.copies and backend.stopped == [copy.copy_id]
        [failed] = [e.detail for e in state.events("ml.copy.failed")]
        assert failed["detail"].startswith(f"failed {MAX_COPY_STRIKES} requests in a row (copy at ")

    asyncio.run(scenario())


def test_a_failed_deploy_copy_is_named_as_one(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path)
        copy = await ep._start_copy("next", 2)
        backend.states[copy.copy_id] = CopyStatus("failed", "model did not load")
        await ep.health.check()
        assert ep.candidates.note == ""
        assert ep.autoscaler.last_failure == f"next copy {copy.copy_id}: model did not load"

    asyncio.run(scenario())

