"""Canary: a share of real requests answered by the candidate, and the one automatic action.

``share_percent`` (whole per cent) of requests go to the candidate, spread evenly: request i is the
candidate's when ``floor((i+1)*p/100) > floor(i*p/100)``, so every 100 consecutive requests hold
exactly p.

Both sides are counted by one rule over the same sliding window (:func:`verdict`): a request counts
once, for the side that answered it, as ``answered`` or ``failed`` — failed only when that side
answered it badly (a model error, 5xx, or a ready replica that ran over ``request_timeout_s``). A
request that side could not take (its replica died mid-request, was starting, or was gone, or its
queue was full) is ``rerouted``: it counts for neither side, and each side's reroutes are shown in
``GET /status``. When the candidate's failure rate exceeds production's by more than
``max_failure_rate_gap`` with at least ``min_requests`` counted candidate requests in the window,
the candidate is taken out and the event audited as ``ml.canary.rollback``.

Replica deaths are the other figure (:func:`deaths_reason`): a candidate whose replicas died
``MAX_CANDIDATE_DEATHS`` times in the window, more often than production's did, is rolled back
too (an out-of-memory version); a single death is replaced, like a production replica's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

Side = Literal["candidate", "production"]
Verdict = Literal["answered", "failed", "rerouted"]
Outcome = Literal["ok", "error", "timeout", "unavailable"]
MAX_CANDIDATE_DEATHS = 3


def verdict(outcome: Outcome, *, status: int | None = None) -> Verdict:
    """How one attempt at a side counts: ``answered``, ``failed``, or ``rerouted`` (neither side).

    Parameters
    ----------
    outcome : {"ok", "error", "timeout", "unavailable"}
        What the replica did: answered 200; answered another status (``status``); was alive and ran
        over ``request_timeout_s``; or could not take the request (died mid-request, not ready,
        not listening, no ready replica, queue full).
    status : int, optional
        The HTTP status of an ``error`` answer: 5xx is the model's failure, 4xx the request's own
        fault (answered, as production would answer it too).

    >>> verdict("ok"), verdict("error", status=500), verdict("error", status=400), verdict("timeout")
    ('answered', 'failed', 'answered', 'failed')
    >>> verdict("unavailable")
    'rerouted'
    """
    if outcome == "unavailable":
        return "rerouted"
    if outcome == "timeout" or (outcome == "error" and (status is None or status >= 500)):
        return "failed"
    return "answered"


def goes_to_canary(index: int, share_percent: int) -> bool:
    """Whether request number ``index`` (0-based) is the candidate's.

    >>> sum(goes_to_canary(i, 5) for i in range(100)), sum(goes_to_canary(i, 50) for i in range(10))
    (5, 5)
    """
    return (index + 1) * share_percent // 100 > index * share_percent // 100


def rollback_reason(*, candidate_failures: int, candidate_requests: int, production_failures: int,
                    production_requests: int, max_gap: float, min_requests: int) -> str | None:
    """Why the candidate must be taken out, or None.

    The rule: ``candidate_requests >= min_requests`` and
    ``candidate_failures / candidate_requests - production_failures / production_requests > max_gap``
    (production's rate is 0 when it has no requests in the window).

    >>> rollback_reason(candidate_failures=3, candidate_requests=10, production_failures=0,
    ...                 production_requests=90, max_gap=0.05, min_requests=10)
    'candidate failed 3 of 10 requests (30.0%) against production 0 of 90 (0.0%): a gap of 30.0 points is over max_failure_rate_gap 5.0 points'
    """
    if candidate_requests < min_requests:
        return None
    cand = candidate_failures / candidate_requests
    prod = production_failures / production_requests if production_requests else 0.0
    gap = cand - prod
    if gap <= max_gap:
        return None
    return (f"candidate failed {candidate_failures} of {candidate_requests} requests ({100 * cand:.1f}%) against "
            f"production {production_failures} of {production_requests} ({100 * prod:.1f}%): a gap of "
            f"{100 * gap:.1f} points is over max_failure_rate_gap {100 * max_gap:.1f} points")


def deaths_reason(*, candidate_deaths: int, production_deaths: int, window_s: float) -> str | None:
    """Why a candidate whose replicas keep dying must be taken out, or None.

    The rule: ``candidate_deaths >= MAX_CANDIDATE_DEATHS`` (3) replica deaths in the window, and more
    than production's replicas had in the same window (deaths that hit both sides alike are the
    machine's, not the candidate's).

    >>> deaths_reason(candidate_deaths=3, production_deaths=1, window_s=600)
    'candidate replicas died 3 times in 600 s against production 1: at least 3 deaths, more than production'
    >>> deaths_reason(candidate_deaths=3, production_deaths=3, window_s=600) is None
    True
    """
    if candidate_deaths < MAX_CANDIDATE_DEATHS or candidate_deaths <= production_deaths:
        return None
    return (f"candidate replicas died {candidate_deaths} times in {window_s:g} s against production "
            f"{production_deaths}: at least {MAX_CANDIDATE_DEATHS} deaths, more than production")


@dataclass
class CanaryWindow:
    """Outcomes of both sides over the last ``window_s`` seconds (timestamps in monotonic seconds):
    each event is (time, side, ``answered`` | ``failed`` | ``rerouted`` | ``died``)."""

    version: int
    share_percent: int
    window_s: float
    routed: int = 0
    events: deque[tuple[float, Side, str]] = field(default_factory=deque)

    def take(self) -> bool:
        """Whether the next request goes to the candidate (advances the share counter)."""
        chosen = goes_to_canary(self.routed, self.share_percent)
        self.routed += 1
        return chosen

    def record(self, side: Side, what: Verdict | Literal["died"], *, now: float) -> None:
        """Count one request of ``side`` (:func:`verdict`), or one of its replicas' deaths, at ``now``
        and forget those older than the window."""
        self.events.append((now, side, what))
        while self.events and self.events[0][0] < now - self.window_s:
            self.events.popleft()

    def counts(self) -> dict[str, int]:
        """Counted requests, failures, reroutes and replica deaths of each side in the window."""
        out = {f"{side}_{what}": 0 for side in ("candidate", "production")
               for what in ("requests", "failures", "rerouted", "replica_deaths")}
        for _, side, what in self.events:
            if what in ("answered", "failed"):
                out[f"{side}_requests"] += 1
                out[f"{side}_failures"] += int(what == "failed")
            else:
                out[f"{side}_{'replica_deaths' if what == 'died' else 'rerouted'}"] += 1
        return out

    def check(self, *, max_gap: float, min_requests: int) -> str | None:
        """:func:`rollback_reason` over the window, then :func:`deaths_reason`."""
        c = self.counts()
        return rollback_reason(candidate_failures=c["candidate_failures"], candidate_requests=c["candidate_requests"],
                               production_failures=c["production_failures"],
                               production_requests=c["production_requests"], max_gap=max_gap,
                               min_requests=min_requests) \
            or deaths_reason(candidate_deaths=c["candidate_replica_deaths"],
                             production_deaths=c["production_replica_deaths"], window_s=self.window_s)

    def summary(self) -> dict[str, Any]:
        return {"candidate_version": self.version, "share_percent": self.share_percent, "window_s": self.window_s,
                **self.counts()}
