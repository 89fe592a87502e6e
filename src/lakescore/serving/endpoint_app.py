"""The endpoint's HTTP app (what ``lakescore serve`` listens with: 127.0.0.1 locally, the driver's
address behind the driver proxy on Databricks). It forwards checked requests to the replicas over
their Unix sockets (:mod:`lakescore.serving.replicas.channel`).

Routes (all need the endpoint's token, checked by one dependency, :func:`token_check`, as
``Authorization: Bearer <token>`` or, where Authorization carries a proxy's token, as
``X-Lakescore-Token: <token>``; 401 without it):

- ``POST /invocations``: score rows (``dataframe_records`` or ``dataframe_split``); where a request
  goes is :mod:`lakescore.serving.policy.routing`. Headers: ``X-Scale-Up-Timeout: N`` caps how long the
  request waits for a replica to start (default ``request_timeout_s``; 0: 503 at once when no replica is ready);
  ``Idempotency-Key: K`` answers a retried request once (the first 200 reply is kept 24 h, bound
  to the request's digest); the same key with another request gets 422 ``idempotency_key_reused``
  (see :mod:`lakescore.serving.http.idempotency`).
- ``GET /status``: the endpoint's state, replicas, last scale decision, shadow and canary figures,
  and the memory of its processes.
- ``POST /shadow`` ``{"version": N}`` / ``DELETE /shadow``: choose or retire the candidate.
- ``POST /canary`` ``{"share_percent": P, "version": N}`` / ``DELETE /canary``: real traffic to it.
- ``POST /deploy`` ``{"version": N}``: serve version N instead (``lakescore serve --deploy N``).
- ``POST /flush``: append the buffered prediction records now.

Errors are JSON ``{"error_code", "message"}``: a lakescore error with its own status (one
exception handler); any other failure of an operator route (all but ``/invocations``) is 500
``endpoint_action_failed`` naming the route and the version still served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.background import BackgroundTask

from lakescore.errors import (
    EndpointActionError,
    EndpointUnavailableError,
    LakescoreError,
    RequestError,
    UnauthorizedError,
)
from lakescore.serving.endpoint import Endpoint, new_request_id
from lakescore.serving.http.idempotency import Kept, KeyClaims, request_digest
from lakescore.serving.http.responses import UNAUTHORIZED, authorized, error_reply, read_body, reply
from lakescore.serving.http.wire import ScoreRequest, parse_request
from lakescore.serving.plan import input_columns
from lakescore.serving.replicas.memory import footprint
from lakescore.serving.state.store import ServingState

MAX_HOLD_S = 3600.0
REPLY_KEPT_S = 86400.0


LOG = logging.getLogger(__name__)


def token_check(token: str) -> Callable[[Request], Awaitable[None]]:
    """The dependency every route of the endpoint's app runs first: the endpoint's token, as
    ``Authorization: Bearer <token>`` or ``X-Lakescore-Token: <token>``
    (:func:`lakescore.serving.http.responses.authorized`).

    Raises
    ------
    UnauthorizedError
        When neither header carries the token (the app answers 401).
    """

    async def require_token(request: Request) -> None:  # async: no thread hop per request
        if not authorized(request, token):
            raise UnauthorizedError(UNAUTHORIZED)

    return require_token


class OperatorRoute(APIRoute):
    """A route of the operator (status, shadow, canary, deploy, flush): a failure that is not a
    lakescore error becomes :class:`~lakescore.errors.EndpointActionError` (500) naming the route and
    the version the endpoint keeps serving, instead of a bare 500; its traceback goes to the log."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:  # type: ignore[override]  # fastapi awaits the handler: our coroutine function is one
        handle = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await handle(request)
            except LakescoreError:
                raise
            except Exception as err:
                endpoint: Endpoint = request.app.state.endpoint
                LOG.error("%s %s failed", request.method, request.url.path, exc_info=err)
                raise EndpointActionError(
                    f"{request.method} {request.url.path} on endpoint {endpoint.plan.name} failed: "
                    f"{type(err).__name__}: {err}. The endpoint keeps serving v{endpoint.plan.version}; retry, "
                    "and if it fails again see the endpoint's log (its traceback is there).",
                    route=request.url.path) from err

        return handler


def parse_hold(value: str | None) -> float | None:
    """Seconds from an ``X-Scale-Up-Timeout`` header (None when absent).

    Raises
    ------
    RequestError
        When it is not a number of seconds between 0 and 3600.
    """
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_HOLD_S:
        raise RequestError(f"X-Scale-Up-Timeout must be seconds between 0 and {MAX_HOLD_S:g}; got {value!r}")
    return seconds


def _asked_version(body: bytes) -> int | None:
    if b'"model_version"' not in body:
        return None
    try:
        version = json.loads(body).get("model_version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) and version > 0 else None


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as err:
        raise RequestError(f"body is not valid JSON ({err}); send an object like {{\"version\": 2}}") from err
    if not isinstance(body, dict):
        raise RequestError("body must be a JSON object like {\"version\": 2}")
    return body


def _int_field(body: dict[str, Any], key: str, *, required: bool) -> int | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key} must be a whole number; got {value!r}")
    return value


class Invocations:
    """``POST /invocations``: hold header, limits, validation, idempotency, answer, and the
    recording and mirroring that run after the reply is sent."""

    def __init__(self, endpoint: Endpoint, *, state: ServingState) -> None:
        self.endpoint, self.state = endpoint, state
        self.claims = KeyClaims(endpoint.plan.name)

    async def columns_for(self, version: int | None) -> dict[str, str]:
        """Input columns of ``version`` (the pinned one when None), read once from the registry."""
        version = version or self.endpoint.plan.version
        if version not in self.endpoint.columns:
            uri = self.endpoint.plan.uri(version)
            self.endpoint.columns[version] = await asyncio.to_thread(input_columns, uri)
        return self.endpoint.columns[version]

    async def __call__(self, request: Request) -> Response:
        s = self.endpoint.s
        received, started = time.time(), time.perf_counter()
        request_id = new_request_id()
        try:
            hold = parse_hold(request.headers.get("x-scale-up-timeout"))
            body = await read_body(request, s.max_body_bytes)
            parsed = parse_request(body, await self.columns_for(_asked_version(body)),
                                   max_body_bytes=s.max_body_bytes, max_rows=s.max_rows_per_request)
            forward = parsed.to_body()
            key = request.headers.get("idempotency-key")
            if key is None:
                return await self._answer(parsed, forward, hold, request_id, received, started)
            return await self._answer_once(key, parsed, forward, hold, request_id, received, started)
        except Exception as err:  # every failure is a JSON reply; the endpoint keeps serving
            return self._error(err, request_id)

    async def _answer_once(self, key: str, parsed: ScoreRequest, forward: bytes, hold: float | None,
                           request_id: str, received: float, started: float) -> Response:
        """Answer a request with ``Idempotency-Key: key``: replay the answer kept for the same request
        (waiting when it is being answered now), refuse another request under the key (422), or
        score it and keep the 200 answer."""
        digest = request_digest(parsed)
        kept: Kept | None = await self.claims.wait_turn(key, digest)
        if kept is not None:
            return self._replayed(kept)
        try:
            kept = await asyncio.to_thread(self.state.saved_reply, self.endpoint.plan.name, key,
                                           request_digest=digest, max_age_s=REPLY_KEPT_S)
            if kept is not None:
                return self._replayed(kept)
            response = await self._answer(parsed, forward, hold, request_id, received, started)
            if response.status_code == 200:
                body = bytes(response.body)
                await asyncio.to_thread(self.state.save_reply, self.endpoint.plan.name, key, 200, body,
                                        request_digest=digest)
                kept = (200, body)  # kept once it is saved: waiters then replay what a retry would
            return response
        finally:
            self.claims.release(key, kept)

    def _replayed(self, kept: Kept) -> Response:
        self.endpoint.counts["replayed"] += 1
        return Response(kept[1], status_code=kept[0], media_type="application/json",
                        headers={"Idempotent-Replayed": "true"})

    def _error(self, err: Exception, request_id: str) -> Response:
        headers = {"X-Request-Id": request_id}
        if isinstance(err, EndpointUnavailableError):
            headers["Retry-After"] = str(err.fields.get("retry_after_s", self.endpoint.pool.retry_after_s))
        return error_reply(err, headers)

    async def _answer(self, parsed: ScoreRequest, forward: bytes, hold: float | None, request_id: str,
                      received: float, started: float) -> Response:
        answer = await self.endpoint.answer(parsed, forward, hold_s=hold)  # errors: a JSON reply in __call__
        latency_ms = (time.perf_counter() - started) * 1000

        async def after() -> None:
            self.endpoint.after_reply(parsed, forward, answer, request_id=request_id, received_at=received,
                                      latency_ms=latency_ms)

        response = reply(answer.status, {**answer.payload, "request_id": request_id},
                         {**answer.headers, "X-Request-Id": request_id})
        response.background = BackgroundTask(after)
        return response


def create_endpoint_app(endpoint: Endpoint, *, token: str, state: ServingState, address: str = "") -> FastAPI:
    """The endpoint's app; its lifespan starts and stops the endpoint (replicas, loops, flush).

    Parameters
    ----------
    endpoint : Endpoint
    token : str
        The endpoint's token (see :func:`token_check`).
    state : ServingState
        Where idempotent replies are kept.
    address : str, default ""
        The address the app listens on, reported by ``GET /status``.
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await endpoint.start()
        try:
            yield
        finally:
            await endpoint.stop()

    app = FastAPI(title="lakescore endpoint", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(token_check(token))])
    app.state.endpoint = endpoint

    async def lakescore_error(_request: Request, err: Exception) -> Response:
        return error_reply(err)

    app.add_exception_handler(LakescoreError, lakescore_error)
    invocations = Invocations(endpoint, state=state)

    @app.post("/invocations")
    async def invoke(request: Request) -> Response:
        return await invocations(request)

    app.include_router(operator_routes(endpoint, address))
    return app


def operator_routes(endpoint: Endpoint, address: str) -> APIRouter:
    """``/status``, ``/shadow``, ``/canary``, ``/deploy`` and ``/flush`` (see the module note)."""
    router = APIRouter(route_class=OperatorRoute)
    candidates = endpoint.candidates

    @router.get("/status")
    async def status() -> Response:  # the state on the loop; /proc of every process off it
        memory = await asyncio.to_thread(footprint, **endpoint.processes())
        return reply(200, {**endpoint.status(), "memory": memory, "address": address})

    @router.post("/shadow")
    async def shadow(request: Request) -> Response:
        version = _int_field(await _json_body(request), "version", required=True)
        return reply(200, await candidates.choose_candidate(int(version)))  # type: ignore[arg-type]

    @router.delete("/shadow")
    async def stop_shadow() -> Response:
        await candidates.retire_candidate(reason="stopped by request")
        return reply(200, candidates.summary())

    @router.post("/canary")
    async def canary(request: Request) -> Response:
        body = await _json_body(request)
        return reply(200, await candidates.start_canary(version=_int_field(body, "version", required=False),
                                                        share_percent=_int_field(body, "share_percent",
                                                                                 required=False)))

    @router.delete("/canary")
    async def stop_canary() -> Response:
        await candidates.retire_candidate(reason="canary stopped by request")
        return reply(200, candidates.summary())

    @router.post("/deploy")
    async def deploy(request: Request) -> Response:
        version = _int_field(await _json_body(request), "version", required=True)
        return reply(200, await endpoint.deploy(int(version)))  # type: ignore[arg-type]

    @router.post("/flush")
    async def flush() -> Response:
        written = await asyncio.to_thread(endpoint.recorder.flush)
        return reply(200, {"rows_written": written, **endpoint.recorder.summary()})

    return router
