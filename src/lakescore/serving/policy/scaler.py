"""Autoscaling: one pure decision per pass, from counters the endpoint reads.

Rules (issue 6):

- ``request_rate`` (default): requests per minute from the change in the endpoint's counter between
  two readings, against ``target_rpm_per_replica``. ``pending_requests``: in-flight plus queued
  requests per replica, averaged over 20 s, against ``target_pending_per_replica`` (1.5).
- Up at once, one replica per pass, no cooldown, never above ``replicas.max``; below ``replicas.min``
  counts as up; a request that found zero replicas counts as demand. A pass woken early (a request at
  zero replicas, a lost replica) is still a pass: the load rule adds a replica only ``scale_interval_s``
  after the last start (a start at zero included), so each decision sees what the last one bought.
- Down one replica only when the load would stay under 80% of target with one replica fewer, and that
  has held for ``scale_down_cooldown_s`` (and as long since the last scale-up).
- To zero only through ``idle_timeout_s`` without a request, unless ``keep_warm``; an idle-stopped
  endpoint stays at zero (below ``replicas.min``) until a request arrives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from lakescore.config import ScaleSignal

DOWN_FRACTION = 0.8
PENDING_WINDOW_S = 20.0


@dataclass(frozen=True)
class ScaleInput:
    """Everything one decision reads (seconds are ``time.monotonic()`` values or durations).

    Attributes
    ----------
    replicas : int
        Replicas of the pinned version that are starting or ready.
    requests_per_min : float
        Rate from the counter change between the last two readings (requests per minute).
    pending_per_replica : float
        In-flight plus queued requests per replica, averaged over the last 20 s.
    waiting_at_zero : int
        Requests that arrived while there were no replicas since the last pass.
    idle_s : float
        Seconds since the last request (or since the endpoint started).
    low_since : float or None
        When the scale-down condition started to hold (carried from the previous decision).
    last_up_at : float or None
        When the last scale-up happened.
    idle_stopped : bool
        The endpoint was taken to zero by the idle timeout and no request has arrived since.
    interval_s : float
        ``scale_interval_s``: the load rule starts a replica at most once per interval (seconds).
    """

    now: float
    replicas: int
    min_replicas: int
    max_replicas: int
    signal: ScaleSignal
    requests_per_min: float
    pending_per_replica: float
    target_rpm: float
    target_pending: float
    cooldown_s: float
    idle_s: float
    idle_timeout_s: float
    keep_warm: bool
    waiting_at_zero: int = 0
    low_since: float | None = None
    last_up_at: float | None = None
    idle_stopped: bool = False
    interval_s: float = 0.0


@dataclass(frozen=True)
class ScaleDecision:
    """The outcome of one pass: the replica count to reach, and why, in plain words."""

    action: Literal["up", "down", "hold"]
    replicas_before: int
    replicas_after: int
    reason: str
    requests_per_min: float
    pending_per_replica: float
    low_since: float | None = None
    idle_stopped: bool = False


def rate_per_minute(count_before: int, count_now: int, seconds: float) -> float:
    """Requests per minute from two readings of a counter ``seconds`` apart (0 when no time passed).

    >>> rate_per_minute(100, 160, 30.0)
    120.0
    """
    return 0.0 if seconds <= 0 else max(0, count_now - count_before) * 60.0 / seconds


def _replicas(n: int) -> str:
    return f"{n} replica{'' if n == 1 else 's'}"


def _load(inp: ScaleInput) -> tuple[float, float, str]:
    """(load, capacity per replica, words) of the chosen signal."""
    if inp.signal == "pending_requests":
        total = inp.pending_per_replica * max(inp.replicas, 1)
        return total, inp.target_pending, f"{total:.2f} requests in flight or queued (20 s average)"
    return inp.requests_per_min, inp.target_rpm, f"{inp.requests_per_min:.1f} requests/min"


def decide(inp: ScaleInput) -> ScaleDecision:
    """Decide one pass.

    Returns
    -------
    ScaleDecision
        ``replicas_after`` differs from ``replicas_before`` by at most one, except an idle stop, which
        goes to zero in one pass.
    """
    n = inp.replicas
    load, per_replica, words = _load(inp)
    hold = ScaleDecision("hold", n, n, "", inp.requests_per_min, inp.pending_per_replica,
                         low_since=None, idle_stopped=inp.idle_stopped)
    if inp.idle_stopped and inp.waiting_at_zero == 0:
        return replace(hold, reason=f"stopped after {inp.idle_timeout_s:g} s idle; the next request starts a replica")
    if n > 0 and not inp.keep_warm and inp.idle_s >= inp.idle_timeout_s:
        return replace(hold, action="down", replicas_after=0, idle_stopped=True,
                       reason=f"scaled down from {_replicas(n)} to 0: no request for {inp.idle_s:.0f} s "
                              f"(idle_timeout_s {inp.idle_timeout_s:g}, keep_warm false)")
    if n < inp.max_replicas and n < max(inp.min_replicas, 1 if inp.waiting_at_zero else 0):
        why = (f"{inp.waiting_at_zero} request(s) arrived at zero replicas" if n == 0 and inp.waiting_at_zero
               else f"below replicas.min {inp.min_replicas}")
        return replace(hold, action="up", replicas_after=n + 1, idle_stopped=False,
                       reason=f"scaled up from {_replicas(n)} to {n + 1}: {why}")
    if n > 0 and load > per_replica * n:
        if n >= inp.max_replicas:
            return replace(hold, reason=f"{words} is above the target for {_replicas(n)}, but replicas.max is "
                                        f"{inp.max_replicas}")
        since_up = math.inf if inp.last_up_at is None else inp.now - inp.last_up_at
        if since_up < inp.interval_s:
            return replace(hold, reason=f"{words} is above the target for {_replicas(n)}, but a replica was started "
                                        f"{since_up:.1f} s ago: the next start waits scale_interval_s "
                                        f"{inp.interval_s:g} to see what that one bought")
        return replace(hold, action="up", replicas_after=n + 1,
                       reason=f"scaled up from {_replicas(n)} to {n + 1}: {words} is above the target of "
                              f"{per_replica:g} per replica")
    floor = max(inp.min_replicas, 1)
    if n > floor and load < DOWN_FRACTION * per_replica * (n - 1):
        since = inp.low_since if inp.low_since is not None else inp.now
        waited = inp.now - since
        after_up = math.inf if inp.last_up_at is None else inp.now - inp.last_up_at
        if waited >= inp.cooldown_s and after_up >= inp.cooldown_s:
            return replace(hold, action="down", replicas_after=n - 1,
                           reason=f"scaled down from {_replicas(n)} to {n - 1}: {words} stayed under 80% of the "
                                  f"target with one replica fewer for {waited:.0f} s")
        return replace(hold, low_since=since,
                       reason=f"{words} would fit in {_replicas(n - 1)}; scaling down after "
                              f"scale_down_cooldown_s {inp.cooldown_s:g} ({waited:.0f} s so far)")
    return replace(hold, reason=f"{words} with {_replicas(n)}: within target")
