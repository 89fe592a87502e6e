"""One endpoint: its copies, where each request goes, and the loops that keep the copies right.

Where a request goes (``answer``):

1. It asks for a version the endpoint does not hold -> the cold path with that version.
2. A canary is live and this request is in its share -> the candidate copy; if the candidate fails,
   the failure is counted and production answers.
3. A ready copy exists -> the quietest idle copy (waiting in a bounded queue when all are busy).
4. Copies are starting -> held until one is ready when the request carries ``X-Scale-Up-Timeout``,
   else the cold path (a loading endpoint is slower, never wrong).
5. The endpoint is at zero copies on purpose -> 503 with ``Retry-After`` at once (and the scaler is
   woken), or, with ``X-Scale-Up-Timeout: N``, held until a copy is ready or N seconds pass.
6. Copies should exist but none is alive (down) -> the cold path, and the scaler replaces them.

A copy that dies mid-request sends that request to the cold path: no request fails because a copy
did. After the reply is sent, the rows are recorded and, when a shadow is chosen, mirrored.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import httpx

from lakescore.errors import EndpointUnavailableError
from lakescore.serving import forkserver
from lakescore.serving.app import trim_memory
from lakescore.serving.backend import ReplicaBackend
from lakescore.serving.candidates import Candidate, CandidateControl
from lakescore.serving.canary import CanaryWindow
from lakescore.serving.cold import score_cold
from lakescore.serving.drift import DriftReference, check_rows
from lakescore.serving.memory import footprint
from lakescore.serving.plan import EndpointPlan
from lakescore.serving.plan import alias_version as _alias_version
from lakescore.serving.recorder import Answered, PredictionRecorder
from lakescore.serving.router import Copy, CopyPool, Role, to_stop
from lakescore.serving.scaler import PENDING_WINDOW_S, ScaleDecision, ScaleInput, decide, rate_per_minute
from lakescore.serving.shadow import ShadowTally
from lakescore.serving.state import ServingState
from lakescore.serving.wire import ScoreRequest

HEALTH_INTERVAL_S = 0.5
MAX_START_BACKOFF_S = 60.0
COPY_START_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Reply:
    """What the endpoint answers: HTTP status, JSON payload, headers, and the answered rows."""

    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] | None = None
    by_candidate: bool = False


class Endpoint(CandidateControl):
    """An endpoint holding ``plan.version`` in copies started through ``backend``.

    Parameters
    ----------
    plan : EndpointPlan
    backend : ReplicaBackend
    state : ServingState
        Audit events, resident copies and idempotent replies.
    token : str
        Bearer token the copies require.
    write : callable
        Appends a frame to the inference table.
    reference : callable, optional
        Called once, in the background, to build the drift reference from the training rows
        (None: rows are recorded with drift_check ``no_reference``).
    """

    def __init__(self, plan: EndpointPlan, *, backend: ReplicaBackend, state: ServingState, token: str,
                 write: Any, reference: Callable[[], DriftReference] | None = None) -> None:
        self.plan, self.s, self.backend, self.state = plan, plan.settings, backend, state
        self.reference = reference
        self.auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.pool = CopyPool(max_queue=self.s.max_queue, retry_after_s=self.s.retry_after_s)
        self.recorder = PredictionRecorder(write=write, state=state, endpoint=plan.name, model_name=plan.model_name,
                                           flush_rows=self.s.record_flush_rows,
                                           drift=lambda frame: check_rows(self.drift, frame))
        self.http: httpx.AsyncClient | None = None
        self.counts: Counter[str] = Counter()
        self.desired = 0
        self.arrivals = 0
        self.last_request_at = time.monotonic()
        self.waiting_at_zero = 0
        self.idle_stopped = False
        self.low_since: float | None = None
        self.last_up_at: float | None = None
        self.reading = (time.monotonic(), 0)
        self.rate = 0.0
        self.start_failures = 0
        self.next_start_at = 0.0
        self.last_failure = ""
        self.pending: deque[tuple[float, float]] = deque()
        self.last_decision: tuple[float, ScaleDecision] | None = None
        self.stale_reason = ""
        self.candidate: Candidate | None = None
        self.shadow: ShadowTally | None = None
        self.canary: CanaryWindow | None = None
        self.candidate_note = ""
        self.last_rollback: dict[str, Any] | None = None
        self.drift: DriftReference | None = None
        self.columns: dict[int, dict[str, str]] = {plan.version: plan.input_columns}
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._cold = asyncio.Semaphore(self.s.cold_max_concurrent)
        self._cold_waiting = 0
        self._mirroring = 0
        self._seq = 0
        self._background: set[asyncio.Task[Any]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start ``replicas.min`` copies and the health, scale, sampling and flush loops."""
        self.http = httpx.AsyncClient(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
                                      timeout=self.s.request_timeout_s)
        n = self.s.replicas.min
        for _ in range(n):
            await self._start_copy("serve", self.plan.version)
        self.desired = n
        if n:
            self.state.audit("ml.scale", self.plan.name, action="up", copies_before=0, copies_after=n,
                             reason=f"started with {n} cop{'y' if n == 1 else 'ies'} (replicas.min)",
                             requests_per_min=0.0)
        for loop in (self._health_loop, self._scale_loop, self._sample_loop, self._flush_loop):
            self._tasks.append(asyncio.create_task(loop()))
        if self.reference is not None:
            self._tasks.append(asyncio.create_task(self._load_drift_reference()))

    async def stop(self) -> None:
        """Stop every loop and copy, then flush the buffered records."""
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        for copy in list(self.pool.copies.values()):
            await asyncio.to_thread(self.backend.stop, copy.copy_id)
        self.pool.copies.clear()
        await asyncio.to_thread(self.state.remove_endpoint_copies, self.plan.name)
        await asyncio.to_thread(self.recorder.flush)
        if self.http is not None:
            await self.http.aclose()

    async def _load_drift_reference(self) -> None:
        if self.reference is None:
            return
        try:
            self.drift = await asyncio.to_thread(self.reference)
            await asyncio.to_thread(trim_memory)  # the training rows are gone; give their pages back
        except Exception as err:  # rows are then recorded with drift_check "no_reference"
            self.counts["drift_reference_errors"] += 1
            self.state.audit("ml.drift.no_reference", self.plan.name, error=f"{type(err).__name__}: {err}")

    # --- copies ------------------------------------------------------------------------------

    async def _start_copy(self, role: Role, version: int) -> Copy | None:
        resident = await asyncio.to_thread(self.state.resident_copies)
        if len(resident) >= self.s.max_warm_copies:
            return None
        self._seq += 1
        copy_id = f"{self.plan.name}-{role}-v{version}-{self._seq}"
        address = await asyncio.to_thread(self.backend.start, copy_id, version)
        pid_of = getattr(self.backend, "pid", None)
        copy = Copy(copy_id, version, role, address, pid=pid_of(copy_id) if pid_of else None)
        self.pool.copies[copy_id] = copy
        await asyncio.to_thread(self.state.add_copy, copy_id, endpoint=self.plan.name, role=role,
                                version=version, pid=copy.pid, address=address)
        return copy

    async def _stop_copy(self, copy: Copy) -> None:
        self.pool.copies.pop(copy.copy_id, None)
        await self.pool.changed()
        await asyncio.to_thread(self.backend.stop, copy.copy_id)
        await asyncio.to_thread(self.state.remove_copy, copy.copy_id)

    async def _retire(self, copy: Copy) -> None:
        """Stop a copy now, or once its current request is answered."""
        if copy.busy:
            copy.state = "draining"
        else:
            await self._stop_copy(copy)

    async def _health_loop(self) -> None:
        while True:
            try:
                await self.health_pass()
            except Exception as err:  # a loop never dies; the status shows the error
                self.counts["health_errors"] += 1
                self.candidate_note = f"health check error: {err}"
            await asyncio.sleep(HEALTH_INTERVAL_S)

    async def health_pass(self) -> None:
        """Read every copy's status: mark ready ones, drop failed ones, stop drained ones, and
        replace any whose proportional memory (RSS when unknown) is above ``memory_limit_mb``."""
        limit = self.s.memory_limit_mb * 2**20
        for copy in list(self.pool.copies.values()):
            status = await asyncio.to_thread(self.backend.status, copy.copy_id)
            copy.rss_bytes = status.rss_bytes or copy.rss_bytes
            copy.pss_bytes = status.pss_bytes or copy.pss_bytes
            copy.pid = status.pid or copy.pid
            if status.state in ("failed", "stopped"):
                await self._lost(copy, status.detail)
            elif copy.state == "starting" and self._start_overdue(copy, status.detail):
                await self._lost(copy, f"not ready {COPY_START_TIMEOUT_S:g} s after it started ({status.detail})")
            elif copy.state == "starting":
                copy.detail = status.detail
                if status.state == "ready":
                    copy.state, copy.detail, copy.last_done = "ready", "", time.monotonic()
                    self.start_failures = 0
                    await self.pool.changed()
            elif copy.state == "draining" and not copy.busy:
                await self._stop_copy(copy)
            elif copy.state == "ready" and copy.memory_bytes and copy.memory_bytes > limit:
                self.state.audit("ml.copy.replaced", self.plan.name, copy_id=copy.copy_id,
                                 memory_mb=round(copy.memory_bytes / 2**20, 1),
                                 measured="proportional" if copy.pss_bytes else "resident",
                                 memory_limit_mb=self.s.memory_limit_mb)
                self.counts["replaced_over_memory"] += 1
                await self._retire(copy)
                await self._start_copy(copy.role, copy.version)

    @staticmethod
    def _start_overdue(copy: Copy, detail: str) -> bool:
        """A copy still starting after COPY_START_TIMEOUT_S is failed, unless it is waiting for room in
        the cluster (a pending pod is waiting, not failing)."""
        waiting = detail.startswith("waiting for room in the cluster")
        return not waiting and time.monotonic() - copy.started_at > COPY_START_TIMEOUT_S

    async def _lost(self, copy: Copy, detail: str) -> None:
        self.counts["copies_failed"] += 1
        self.last_failure = f"{copy.copy_id}: {detail}"
        if copy.state == "starting" and copy.role == "serve":  # it never served: back off before the next one
            self.start_failures += 1
            self.next_start_at = time.monotonic() + min(2.0 ** self.start_failures, MAX_START_BACKOFF_S)
        self.state.audit("ml.copy.failed", self.plan.name, copy_id=copy.copy_id, role=copy.role,
                         version=copy.version, detail=detail)
        await self._stop_copy(copy)
        if copy.role == "serve":
            self._kick.set()  # replace it now, not at the next interval
        else:
            self.candidate_note = f"candidate copy {copy.copy_id} failed: {detail}"

    # --- scaling -----------------------------------------------------------------------------

    def live(self) -> list[Copy]:
        """Copies of the pinned version that are starting or ready."""
        return self.pool.of("serve", "starting", "ready")

    async def _scale_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=self.s.scale_interval_s)
            except asyncio.TimeoutError:
                pass
            self._kick.clear()
            try:
                await self.scale_pass()
                await self._check_stale()
            except Exception as err:  # keep deciding; the status shows the error
                self.counts["scale_errors"] += 1
                self.candidate_note = f"scale pass error: {err}"

    async def _sample_loop(self) -> None:
        while True:
            now = time.monotonic()
            busy = sum(c.busy for c in self.live())
            self.pending.append((now, (busy + self.pool.waiting) / max(len(self.live()), 1)))
            while self.pending and self.pending[0][0] < now - PENDING_WINDOW_S:
                self.pending.popleft()
            await asyncio.sleep(1.0)

    async def scale_pass(self) -> ScaleDecision:
        """Read the counters, decide (:func:`lakescore.serving.scaler.decide`), and act."""
        now = time.monotonic()
        before_t, before_n = self.reading
        if now - before_t >= self.s.scale_interval_s / 2:  # a woken pass keeps the last full reading's rate
            self.rate = rate_per_minute(before_n, self.arrivals, now - before_t)
            self.reading = (now, self.arrivals)
        live = self.live()
        pending = sum(v for _, v in self.pending) / len(self.pending) if self.pending else 0.0
        busy = self.pool.waiting + self._cold_waiting + sum(c.busy for c in self.pool.copies.values())
        if busy:
            self.last_request_at = now  # a held or running request is not idleness
        decision = decide(ScaleInput(
            now=now, copies=len(live), min_copies=self.s.replicas.min, max_copies=self.s.replicas.max,
            signal=self.s.scale_signal, requests_per_min=self.rate,
            pending_per_copy=pending, target_rpm=self.s.target_rpm_per_replica,
            target_pending=self.s.target_pending_per_replica, cooldown_s=self.s.scale_down_cooldown_s,
            idle_s=now - self.last_request_at, idle_timeout_s=self.s.idle_timeout_s, keep_warm=self.s.keep_warm,
            waiting_at_zero=self.waiting_at_zero + (self.pool.waiting if not live else 0),
            low_since=self.low_since, last_up_at=self.last_up_at, idle_stopped=self.idle_stopped))
        self.waiting_at_zero = 0
        self.low_since, self.idle_stopped = decision.low_since, decision.idle_stopped
        wanted = decision.copies_after  # kept even when a start is blocked: blocked is down, not zero
        if decision.action == "up" and now < self.next_start_at:
            decision = replace(decision, action="hold", copies_after=decision.copies_before,
                               reason=f"wanted to scale up ({decision.reason}), but {self.start_failures} copies "
                                      f"failed to start in a row; next try in {self.next_start_at - now:.0f} s. "
                                      f"Last failure: {self.last_failure}")
        elif decision.action == "up":
            if await self._start_copy("serve", self.plan.version) is None:
                decision = replace(decision, action="hold", copies_after=decision.copies_before,
                                   reason=f"wanted to scale up ({decision.reason}), but max_warm_copies "
                                          f"{self.s.max_warm_copies} copies are resident across endpoints")
            else:
                self.last_up_at = now
        elif decision.action == "down":
            victims = live if decision.copies_after == 0 else [c for c in [to_stop(live)] if c is not None]
            for victim in victims:
                await self._retire(victim)
        self.desired = wanted
        self.last_decision = (time.time(), decision)
        if decision.action != "hold":
            self.state.audit("ml.scale", self.plan.name, action=decision.action,
                             copies_before=decision.copies_before, copies_after=decision.copies_after,
                             reason=decision.reason, requests_per_min=round(decision.requests_per_min, 3),
                             pending_per_copy=round(decision.pending_per_copy, 3))
        return decision

    async def _check_stale(self) -> None:
        champion = await asyncio.to_thread(_alias_version, self.plan.model_name, self.plan.alias)
        if champion is not None and champion != self.plan.version:
            reason = (f"{self.plan.alias} is v{champion}; this endpoint still serves v{self.plan.version}, pinned "
                      f"when it started. Redeploy (restart `lakescore serve`) to serve v{champion}.")
            if reason != self.stale_reason:
                self.state.audit("ml.endpoint.stale", self.plan.name, serving=self.plan.version, champion=champion)
            self.stale_reason = reason
        else:
            self.stale_reason = ""

    # --- answering ---------------------------------------------------------------------------

    async def answer(self, request: ScoreRequest, body: bytes, *, hold_s: float | None) -> Reply:
        """Answer one validated request (see the module docstring for where it goes).

        Raises
        ------
        EndpointUnavailableError
            At zero copies without a hold (or when the hold ran out), or when a queue is full.
        ServingError
            When the cold path fails too.
        """
        self.last_request_at = time.monotonic()
        asked = request.model_version
        if asked is not None and asked != self.plan.version:
            candidate = self.candidate if self.canary is not None else None
            if candidate is not None and asked == candidate.version:
                rows = await self._from_candidate(body)
                if rows is not None:
                    return self._reply(rows, "warm", asked, by_candidate=True)
            return self._reply(await self._cold_path(asked, body), "cold", asked)
        if self.canary is not None and self.canary.take():
            rows = await self._from_candidate(body)
            if rows is not None:
                return self._reply(rows, "warm", self.canary.version, by_candidate=True)
        return await self._production(body, hold_s=hold_s)

    async def _production(self, body: bytes, *, hold_s: float | None) -> Reply:
        self.arrivals += 1
        version = self.plan.version
        copy = None
        if self.pool.of("serve", "ready"):
            copy = await self.pool.acquire("serve", wait_s=self.s.request_timeout_s)
            if copy is None:
                raise EndpointUnavailableError(
                    f"every copy stayed busy for request_timeout_s {self.s.request_timeout_s:g} s; retry after "
                    f"{self.s.retry_after_s} s or raise replicas.max", retry_after_s=self.s.retry_after_s)
        elif self.live():
            if hold_s:
                copy = await self.pool.acquire("serve", wait_s=hold_s)
        elif self.desired == 0:
            self.waiting_at_zero += 1
            self._kick.set()
            if hold_s:
                copy = await self.pool.acquire("serve", wait_s=hold_s)
            if copy is None:
                self.counts["rejected_at_zero"] += 1
                raise EndpointUnavailableError(
                    f"endpoint {self.plan.name} is at zero copies and a copy is starting; retry after "
                    f"{self.s.retry_after_s} s, or send X-Scale-Up-Timeout: <seconds> to wait for it",
                    retry_after_s=self.s.retry_after_s)
        else:
            self._kick.set()  # copies should exist but none is alive: replace them
        if copy is not None:
            outcome, value = await self._ask(copy, body)
            if self.canary is not None:
                self.canary.record("production", failed=outcome != "ok", now=time.monotonic())
            if outcome == "ok":
                return self._reply(value, "warm", version)
            if outcome == "error":
                return value
            self.counts["copy_failures"] += 1
        return self._reply(await self._cold_path(version, body), "cold", version)

    async def _ask(self, copy: Copy, body: bytes) -> tuple[str, Any]:
        """Send a body to a copy: ("ok", rows) | ("unavailable", detail) | ("error", Reply)."""
        assert self.http is not None  # set in start()
        try:
            resp = await self.http.post(f"{copy.address}/invocations", content=body, headers=self.auth)
        except httpx.HTTPError as err:
            await self.pool.release(copy, failed=True)
            return "unavailable", f"{type(err).__name__}: {err}"
        await self.pool.release(copy, failed=resp.status_code >= 500)
        try:
            payload = resp.json()
        except json.JSONDecodeError:
            return "unavailable", f"copy answered {resp.status_code} without JSON"
        if resp.status_code == 200:
            return "ok", payload["predictions"]
        if resp.status_code == 503:
            return "unavailable", payload.get("message", "copy not ready")
        return "error", Reply(resp.status_code, payload)

    async def _from_candidate(self, body: bytes) -> list[dict[str, Any]] | None:
        """The candidate's rows, or None after counting a failure (production then answers)."""
        canary = self.canary
        if canary is None:
            return None
        copy = await self.pool.acquire("candidate", wait_s=self.s.request_timeout_s) \
            if self.pool.of("candidate", "ready") else None
        outcome, value = ("unavailable", "no ready candidate copy") if copy is None else await self._ask(copy, body)
        canary.record("candidate", failed=outcome != "ok", now=time.monotonic())
        if outcome != "ok":
            self.counts["candidate_failures"] += 1
        await self._maybe_roll_back(canary)
        return value if outcome == "ok" else None

    async def _cold_path(self, version: int, body: bytes) -> list[dict[str, Any]]:
        if self._cold_waiting >= self.s.max_queue:
            raise EndpointUnavailableError(
                f"{self._cold_waiting} requests already wait for the cold path (max_queue {self.s.max_queue}); "
                f"retry after {self.s.retry_after_s} s", retry_after_s=self.s.retry_after_s)
        self._cold_waiting += 1
        try:
            await self._cold.acquire()
        finally:
            self._cold_waiting -= 1
        try:
            self.counts["cold"] += 1
            return await score_cold(model_uri=self.plan.uri(version), version=version,
                                    tracking_uri=self.plan.tracking_uri, body=body, timeout_s=self.s.cold_timeout_s)
        finally:
            self._cold.release()

    def _reply(self, rows: list[dict[str, Any]], served: str, version: int, *, by_candidate: bool = False) -> Reply:
        self.counts[f"served_{served}"] += 1
        payload = {"predictions": rows, "served": served, "model_version": version, "endpoint": self.plan.name}
        return Reply(200, payload, {"X-Served-By": served, "X-Model-Version": str(version)}, rows, by_candidate)

    # --- after the reply ---------------------------------------------------------------------

    def after_reply(self, request: ScoreRequest, body: bytes, reply: Reply, *, request_id: str,
                    received_at: float, latency_ms: float) -> None:
        """Record the answered rows and mirror the request to a shadow (runs after the reply)."""
        if reply.rows is None:
            return
        due = self.recorder.add(Answered(request_id, received_at, request.records(), reply.rows, latency_ms))
        if due:
            self._spawn(asyncio.to_thread(self.recorder.flush))
        if self.shadow is not None and self.canary is None and not reply.by_candidate \
                and reply.payload.get("model_version") == self.plan.version:
            self._spawn(self._mirror(self.shadow, body, reply.rows))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _mirror(self, tally: ShadowTally, body: bytes, served_rows: list[dict[str, Any]]) -> None:
        if self._mirroring >= self.s.max_queue:
            tally.skipped += 1
            return
        self._mirroring += 1
        try:
            copy = await self.pool.acquire("candidate", wait_s=self.s.request_timeout_s) \
                if self.pool.of("candidate") else None
            outcome, value = ("unavailable", "") if copy is None else await self._ask(copy, body)
            if outcome == "ok":
                tally.add(served_rows, value)
            else:
                tally.mirror_failures += 1
        finally:
            self._mirroring -= 1

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.record_flush_interval_s)
            await asyncio.to_thread(self.recorder.flush)
            await asyncio.to_thread(self.state.forget_replies, older_than_s=86400)

    # --- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Everything an operator asks: version, stale, copies (with resident memory), the last
        scale decision, shadow and canary figures, and the recorder."""
        now = time.monotonic()
        ready = self.pool.of("serve", "ready")
        state = "ready" if ready else ("starting" if self.live() else ("scaled to zero" if self.desired == 0
                                                                        else "down"))
        decision = None
        if self.last_decision is not None:
            at, d = self.last_decision
            decision = {"at": at, "action": d.action, "copies_before": d.copies_before,
                        "copies_after": d.copies_after, "reason": d.reason}
        return {"endpoint": self.plan.name, "state": state, "model": self.plan.model_uri,
                "version": self.plan.version, "pinned_by": self.plan.selection, "stale": bool(self.stale_reason),
                "stale_reason": self.stale_reason, "desired_copies": self.desired,
                "copies": [c.summary(now) for c in self.pool.copies.values()], "queued": self.pool.waiting,
                "cold_waiting": self._cold_waiting, "idle_s": round(now - self.last_request_at, 1),
                "last_scale_decision": decision, "last_copy_failure": self.last_failure,
                "counts": dict(self.counts), **self.candidate_summary(),
                "recorder": self.recorder.summary(), "drift_reference": self.drift is not None,
                "max_warm_copies": self.s.max_warm_copies,
                "memory": footprint(endpoint=os.getpid(), fork_server=forkserver.server_pid(),
                                    copies=[c.pid for c in self.pool.copies.values()])}


def new_request_id() -> str:
    """A fresh request id (32 hex digits)."""
    return uuid.uuid4().hex

