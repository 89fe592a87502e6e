"""The autoscaler of one endpoint: its counters, the pending-request samples, the backoff after
replicas that failed to start, and the loop that calls the pure :func:`lakescore.serving.policy.scaler.decide`
and carries its decision out (start one replica, retire one, or all at an idle stop).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from lakescore.config import ServingConfig
from lakescore.serving.policy.scaler import PENDING_WINDOW_S, ScaleDecision, ScaleInput, decide, rate_per_minute
from lakescore.serving.replicas.pool import Replica, ReplicaPool, Role, to_stop
from lakescore.serving.state.store import ServingState

MAX_START_BACKOFF_S = 60.0


class Autoscaler:
    """Keeps the pinned version's replica count right.

    Parameters
    ----------
    name : str
        The endpoint's name (audit events).
    version : int
        The pinned version its replicas hold.
    settings : ServingConfig
    pool : ReplicaPool
    state : ServingState
    start_replica : callable
        ``await start_replica(role, version) -> Replica | None`` (None: ``max_warm_replicas`` reached).
    retire : callable
        ``await retire(replica)``: stop a replica now or once its request is answered.
    held_elsewhere : callable
        Requests held outside the pool (the cold path's waiters): they are not idleness.
    refused : callable, optional
        ``refused(version) -> str``: why no replica of ``version`` may start (empty: it may), e.g. it
        was deleted from the registry (:meth:`lakescore.serving.policy.stale.StaleCheck.refusal`).
    """

    def __init__(self, name: str, version: int, settings: ServingConfig, *, pool: ReplicaPool, state: ServingState,
                 start_replica: Callable[[Role, int], Awaitable[Replica | None]],
                 retire: Callable[[Replica], Awaitable[None]], held_elsewhere: Callable[[], int],
                 refused: Callable[[int], str] = lambda version: "") -> None:
        self.name, self.version, self.s = name, version, settings
        self.pool, self.state = pool, state
        self._start_replica, self._retire, self._held_elsewhere = start_replica, retire, held_elsewhere
        self._refused = refused
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
        self.no_room = False
        self.last_failure = ""
        self.last_error = ""
        self.errors = 0
        self.pending: deque[tuple[float, float]] = deque()
        self.last_decision: tuple[float, ScaleDecision] | None = None
        self._kick = asyncio.Event()

    # --- what the endpoint tells it ----------------------------------------------------------

    def arrived(self, *, counted: bool) -> None:
        """A request arrived (``counted``: it asks for the pinned version and counts towards the rate)."""
        self.last_request_at = time.monotonic()
        self.arrivals += int(counted)

    def demand(self, *, counted: bool = False) -> bool:
        """A request found no replica ready: when none is starting either, count it as demand at zero
        replicas (once per request: ``counted`` says it was already) and decide now rather than at the
        next interval. Returns whether the request is counted now."""
        if self.live():
            return counted
        if not counted:
            self.waiting_at_zero += 1
        self.kick()
        return True

    def kick(self) -> None:
        """Run a scale pass now (a replica was lost, or a request waits at zero replicas)."""
        self._kick.set()

    def replica_ready(self) -> None:
        """A replica of the pinned version became ready: starts work again, the backoff is over."""
        self.start_failures, self.next_start_at = 0, 0.0

    def start_failed(self) -> None:
        """A replica of the pinned version failed before it served: back off 2, 4, ... 60 s."""
        self.start_failures += 1
        self.next_start_at = time.monotonic() + min(2.0 ** self.start_failures, MAX_START_BACKOFF_S)

    def can_start(self) -> bool:
        """Whether a replica can start now: no start backoff, the last start found room, and the
        version may start (not deleted from the registry)."""
        return time.monotonic() >= self.next_start_at and not self.no_room and not self._refused(self.version)

    def live(self) -> list[Replica]:
        """Replicas of the pinned version that are starting or ready."""
        return self.pool.of("serve", "starting", "ready")

    # --- loops -------------------------------------------------------------------------------

    async def scale_loop(self) -> None:
        """Decide every ``scale_interval_s`` (or at once when kicked); never dies."""
        while True:
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=self.s.scale_interval_s)
            except TimeoutError:
                pass
            self._kick.clear()
            try:
                await self.scale_pass()
            except Exception as err:  # keep deciding; the status shows the error
                self.errors += 1
                self.last_error = f"scale pass error: {err}"

    async def sample_loop(self) -> None:
        """Every second: in-flight plus queued requests per replica, kept for ``PENDING_WINDOW_S``."""
        while True:
            now = time.monotonic()
            live = self.live()
            busy = sum(c.busy for c in live)
            self.pending.append((now, (busy + self.pool.waiting) / max(len(live), 1)))
            while self.pending and self.pending[0][0] < now - PENDING_WINDOW_S:
                self.pending.popleft()
            await asyncio.sleep(1.0)

    # --- one pass ----------------------------------------------------------------------------

    def _input(self, now: float) -> ScaleInput:
        before_t, before_n = self.reading
        if now - before_t >= self.s.scale_interval_s / 2:  # a woken pass keeps the last full reading's rate
            self.rate = rate_per_minute(before_n, self.arrivals, now - before_t)
            self.reading = (now, self.arrivals)
        live = self.live()
        pending = sum(v for _, v in self.pending) / len(self.pending) if self.pending else 0.0
        busy = self.pool.waiting + self._held_elsewhere() + sum(c.busy for c in self.pool.replicas.values())
        if busy:
            self.last_request_at = now  # a held or running request is not idleness
        s = self.s
        return ScaleInput(
            now=now, replicas=len(live), min_replicas=s.replicas.min, max_replicas=s.replicas.max,
            signal=s.scale_signal, requests_per_min=self.rate, pending_per_replica=pending,
            target_rpm=s.target_rpm_per_replica, target_pending=s.target_pending_per_replica,
            cooldown_s=s.scale_down_cooldown_s, idle_s=now - self.last_request_at, idle_timeout_s=s.idle_timeout_s,
            keep_warm=s.keep_warm, waiting_at_zero=self._at_zero(live),
            low_since=self.low_since, last_up_at=self.last_up_at, idle_stopped=self.idle_stopped,
            interval_s=s.scale_interval_s)

    def _at_zero(self, live: list[Replica]) -> int:
        """Requests at zero replicas, each once: those that arrived since the last pass, or those still
        waiting in the queue (which may have arrived before it), whichever is more; a request held in
        the queue since the last pass is in both counts."""
        return max(self.waiting_at_zero, 0 if live else self.pool.waiting)

    async def scale_pass(self) -> ScaleDecision:
        """Read the counters, decide (:func:`lakescore.serving.policy.scaler.decide`), and act."""
        now = time.monotonic()
        decision = decide(self._input(now))
        self.waiting_at_zero = 0
        self.low_since, self.idle_stopped = decision.low_since, decision.idle_stopped
        wanted = decision.replicas_after  # kept even when a start is blocked: blocked is down, not zero
        if decision.action == "up":
            decision = await self._up(decision, now)
        elif decision.action == "down":
            live = self.live()
            victims = live if decision.replicas_after == 0 else [c for c in [to_stop(live)] if c is not None]
            for victim in victims:
                await self._retire(victim)
        self.desired = wanted
        self.last_decision = (time.time(), decision)
        if decision.action != "hold":
            self.state.audit("ml.scale", self.name, action=decision.action,
                             replicas_before=decision.replicas_before, replicas_after=decision.replicas_after,
                             reason=decision.reason, requests_per_min=round(decision.requests_per_min, 3),
                             pending_per_replica=round(decision.pending_per_replica, 3))
        return decision

    async def _up(self, decision: ScaleDecision, now: float) -> ScaleDecision:
        """Start one replica, unless the version may not start, or the start backoff or
        ``max_warm_replicas`` holds it back."""
        refused = self._refused(self.version)
        if refused:
            return replace(decision, action="hold", replicas_after=decision.replicas_before,
                           reason=f"wanted to scale up ({decision.reason}), but {refused}")
        if now < self.next_start_at:
            return replace(decision, action="hold", replicas_after=decision.replicas_before,
                           reason=f"wanted to scale up ({decision.reason}), but {self.start_failures} replicas "
                                  f"failed to start in a row; next try in {self.next_start_at - now:.0f} s. "
                                  f"Last failure: {self.last_failure}")
        if await self._start_replica("serve", self.version) is None:
            self.no_room = True
            return replace(decision, action="hold", replicas_after=decision.replicas_before,
                           reason=f"wanted to scale up ({decision.reason}), but max_warm_replicas "
                                  f"{self.s.max_warm_replicas} replicas are resident across endpoints")
        self.no_room = False
        self.last_up_at = now
        return decision

    def summary(self, now: float) -> dict[str, Any]:
        """The scaler's part of the endpoint's status."""
        decision = None
        if self.last_decision is not None:
            at, d = self.last_decision
            decision = {"at": at, "action": d.action, "replicas_before": d.replicas_before,
                        "replicas_after": d.replicas_after, "reason": d.reason}
        return {"desired_replicas": self.desired, "idle_s": round(now - self.last_request_at, 1),
                "last_scale_decision": decision, "last_replica_failure": self.last_failure}
