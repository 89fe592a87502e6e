"""The health pass over copies with scripted states: copies over ``memory_limit_mb`` are replaced,
copies that fail to start back off, a copy retired mid-pass is not failed, a copy that fails
``MAX_COPY_STRIKES`` requests in a row is replaced, and a deploy's failed copy is named as one."""

from __future__ import annotations

import asyncio

import pytest

from lakescore.errors import EndpointUnavailableError
from lakescore.serving.backend import CopyStatus
from lakescore.serving.health import MAX_COPY_STRIKES
from serving_fakes import fake_endpoint, one_row


def test_a_copy_over_memory_limit_mb_is_replaced(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, state = fake_endpoint(tmp_path, memory_limit_mb=100)
        first = await ep._start_copy("serve", 1)
        backend.states[first.copy_id] = CopyStatus("ready", rss_bytes=90 * 2**20, pid=None)
        await ep.health.check()
        assert first.state == "ready" and ep.status()["copies"][0]["resident_mb"] == 90.0
        backend.states[first.copy_id] = CopyStatus("ready", rss_bytes=101 * 2**20)
        await ep.health.check()
        assert backend.stopped == [first.copy_id] and len(backend.started) == 2
        [event] = [e.detail for e in state.events("ml.copy.replaced")]
        assert event == {"copy_id": first.copy_id, "memory_mb": 101.0, "measured": "resident", "memory_limit_mb": 100}

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

