"""The client against a scripted server on 127.0.0.1: retries, waits, deadline, idempotency keys."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lakescore.errors import EndpointUnavailableError, IdempotencyKeyReusedError, LakescoreError, RequestError
from lakescore.serving.http.client import ClientSettings, EndpointClient

OK = (200, {"predictions": [{"prediction": 1, "served": "warm", "model_version": 1}]})
BUSY = (503, {"error_code": "endpoint_unavailable", "message": "at zero replicas"})


class Script:
    """Replies to give, in order, and the headers each request arrived with."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict[str, Any]]] = []
        self.seen: list[dict[str, str]] = []


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    app = FastAPI()

    @app.post("/invocations")
    async def invocations(request: Request) -> JSONResponse:
        script.seen.append(dict(request.headers))
        status, body = script.replies.pop(0) if script.replies else OK
        return JSONResponse(body, status_code=status, headers={"Retry-After": "3"} if status == 503 else None)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", script
    srv.should_exit = True
    thread.join(timeout=10)


class FakeTime:
    """Waits that pass instantly but are counted, so a test can check them."""

    def __init__(self) -> None:
        self.now, self.waits = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def client(address: str, settings: ClientSettings, fake: FakeTime, **kwargs: Any) -> EndpointClient:
    return EndpointClient(address, "tok", settings=settings, sleep=fake.sleep, clock=fake.clock, **kwargs)


def test_503s_are_retried_with_growing_waits_and_one_idempotency_key(server) -> None:
    address, script = server
    script.seen.clear()
    script.replies[:] = [BUSY, BUSY]
    fake = FakeTime()
    reply = client(address, ClientSettings(hold_s=600, timeout_s=660, deadline_s=660), fake).predict([{"a": 1}])
    assert reply["predictions"][0]["prediction"] == 1
    assert fake.waits == [15, 30]
    keys = [h["idempotency-key"] for h in script.seen]
    assert len(keys) == 3 and len(set(keys)) == 1
    assert [h["x-scale-up-timeout"] for h in script.seen] == ["600"] * 3
    assert all(h["authorization"] == "Bearer tok" for h in script.seen)


def test_the_deadline_stops_the_retries(server) -> None:
    address, script = server
    script.replies[:] = [BUSY] * 5
    fake = FakeTime()
    c = client(address, ClientSettings(hold_s=0, timeout_s=5, deadline_s=40, retry_waits_s=(15, 30, 60)), fake)
    with pytest.raises(EndpointUnavailableError, match="did not answer after 2 attempt"):
        c.predict([{"a": 1}])
    assert fake.waits == [15]  # waiting 30 more would pass the 40 s deadline
    script.replies.clear()


def test_refused_input_is_not_retried(server) -> None:
    address, script = server
    script.seen.clear()
    script.replies[:] = [(400, {"error_code": "invalid_request", "message": "unknown column 'x' in row 0"})]
    with pytest.raises(RequestError, match="unknown column 'x'") as caught:
        client(address, ClientSettings(), FakeTime()).predict([{"x": 1}])
    assert caught.value.http_status == 400 and len(script.seen) == 1


def test_a_reused_key_is_raised_as_such_and_not_retried(server) -> None:
    address, script = server
    script.seen.clear()
    script.replies[:] = [(422, {"error_code": "idempotency_key_reused", "key": "nightly:1",
                                "message": "Idempotency-Key 'nightly:1' on endpoint 'ep' was first used for another "
                                           "request"})]
    with pytest.raises(IdempotencyKeyReusedError, match=r"^422 idempotency_key_reused: Idempotency-Key 'nightly:1' "
                                                        r".* Keys of job 'nightly' are 'nightly:<n>'") as caught:
        client(address, ClientSettings(), FakeTime(), job_id="nightly").predict([{"a": 3}])
    assert caught.value.http_status == 422 and caught.value.fields == {"key": "nightly:1"}
    assert len(script.seen) == 1
    script.replies[:] = [(422, {"error_code": "idempotency_key_reused", "message": "first used for another"})]
    with pytest.raises(IdempotencyKeyReusedError) as caught:  # a key the caller chose: no job hint
        client(address, ClientSettings(), FakeTime(), job_id="nightly").predict([{"a": 3}], idempotency_key="mine")
    assert "Keys of job" not in str(caught.value) and caught.value.fields == {"key": "mine"}


def test_low_latency_retries_once_and_only_idempotent_requests(server) -> None:
    address, script = server
    low = ClientSettings(hold_s=0, timeout_s=30, deadline_s=30, retry_waits_s=(1,), retry_only_idempotent=True)
    script.seen.clear()
    script.replies[:] = [BUSY, BUSY]
    with pytest.raises(EndpointUnavailableError):
        client(address, low, FakeTime()).predict([{"a": 1}])
    assert len(script.seen) == 2 and "x-scale-up-timeout" not in script.seen[0]
    script.seen.clear()
    script.replies[:] = [BUSY]
    with pytest.raises(EndpointUnavailableError):
        client(address, low, FakeTime()).predict([{"a": 1}], idempotent=False)
    assert len(script.seen) == 1 and "idempotency-key" not in script.seen[0]
    script.replies.clear()


def test_a_durable_job_id_makes_the_same_keys_on_a_rerun(server) -> None:
    address, script = server
    background = ClientSettings(durable_job_id=True)
    with pytest.raises(LakescoreError, match="needs a job id"):
        client(address, background, FakeTime())
    script.seen.clear()
    for _ in range(2):  # the job, then the same job re-run
        c = client(address, background, FakeTime(), job_id="nightly-2026-11-30")
        c.predict([{"a": 1}])
        c.predict([{"a": 2}])
    assert [h["idempotency-key"] for h in script.seen] == ["nightly-2026-11-30:1", "nightly-2026-11-30:2"] * 2


def test_the_token_can_travel_in_x_lakescore_token_next_to_a_workspace_token(server) -> None:
    address, script = server
    script.seen.clear()
    fake = FakeTime()
    client(address, ClientSettings(), fake, auth_header="x-lakescore-token",
           workspace_token="dapi-workspace").predict([{"a": 1}])
    [seen] = script.seen
    assert (seen["x-lakescore-token"], seen["authorization"]) == ("tok", "Bearer dapi-workspace")
    with pytest.raises(LakescoreError, match="auth_header must be 'authorization' or 'x-lakescore-token'; got 'cookie'"):
        client(address, ClientSettings(), fake, auth_header="cookie")
    with pytest.raises(LakescoreError, match="pass auth_header='x-lakescore-token'"):
        client(address, ClientSettings(), fake, workspace_token="dapi-workspace")


def test_a_client_from_a_copied_home_sends_that_homes_token_not_the_recorded_token_file(server, tmp_path) -> None:
    import json
    import shutil

    address, script = server
    script.seen.clear()
    original = tmp_path / "original" / ".lakescore"
    (original / "serving" / "endpoints").mkdir(parents=True)
    (original / "serving" / "token").write_text("tok-original\n")
    (original / "serving" / "endpoints" / "main.json").write_text(json.dumps(
        {"address": address, "url": address, "pid": 1, "version": 1,
         "token_file": str(original / "serving" / "token")}))
    copy = tmp_path / "copy" / ".lakescore"
    shutil.copytree(original, copy)
    (copy / "serving" / "token").write_text("tok-copy\n")  # the copy's endpoint has its own token
    EndpointClient.from_home(copy, "main", settings=ClientSettings()).predict([{"a": 1}])
    assert script.seen[-1]["authorization"] == "Bearer tok-copy"
