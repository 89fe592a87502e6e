"""Canary: a share of real requests answered by the candidate, and the one automatic action.

``share_percent`` (whole per cent) of requests go to the candidate, spread evenly: request i is the
candidate's when ``floor((i+1)*p/100) > floor(i*p/100)``, so every 100 consecutive requests hold
exactly p. Failures (errors, timeouts, an unavailable candidate) are counted on both sides over the
same sliding window; when the candidate's failure rate exceeds production's by more than
``max_failure_rate_gap`` with at least ``min_requests`` candidate requests in the window, the
candidate is taken out and the event audited as ``ml.canary.rollback``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

Side = Literal["candidate", "production"]


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


@dataclass
class CanaryWindow:
    """Outcomes of both sides over the last ``window_s`` seconds (timestamps in monotonic seconds)."""

    version: int
    share_percent: int
    window_s: float
    routed: int = 0
    events: deque[tuple[float, Side, bool]] = field(default_factory=deque)

    def take(self) -> bool:
        """Whether the next request goes to the candidate (advances the share counter)."""
        chosen = goes_to_canary(self.routed, self.share_percent)
        self.routed += 1
        return chosen

    def record(self, side: Side, *, failed: bool, now: float) -> None:
        """Count one outcome of ``side`` at ``now`` and forget those older than the window."""
        self.events.append((now, side, failed))
        while self.events and self.events[0][0] < now - self.window_s:
            self.events.popleft()

    def counts(self) -> dict[str, int]:
        """Requests and failures of each side in the window."""
        out = {"candidate_requests": 0, "candidate_failures": 0, "production_requests": 0, "production_failures": 0}
        for _, side, failed in self.events:
            out[f"{side}_requests"] += 1
            out[f"{side}_failures"] += int(failed)
        return out

    def check(self, *, max_gap: float, min_requests: int) -> str | None:
        """:func:`rollback_reason` over the window."""
        return rollback_reason(**self.counts(), max_gap=max_gap, min_requests=min_requests)

    def summary(self) -> dict[str, Any]:
        return {"candidate_version": self.version, "share_percent": self.share_percent, "window_s": self.window_s,
                **self.counts()}
