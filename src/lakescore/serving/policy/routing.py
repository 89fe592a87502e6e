"""Where one request goes: a pure function of a snapshot of the endpoint.

The rules, in order (:func:`route`):

1. The request names a version other than the pinned one: the live canary's candidate when its replica
   is ready, else the cold path with that version (the endpoint holds no replica of it).
2. The request is in the canary's share: the candidate, unless its replica is still starting — then
   production answers and the candidate is not charged (it could not have answered). A candidate
   whose replica is gone is charged for the request, and production answers it.
3. A ready replica is idle: that replica (``warm``).
4. Ready replicas are all busy: wait in the bounded queue for one (``queue``, up to
   ``request_timeout_s``).
5. No replica is ready, but replicas are starting or a start can be triggered (also at zero replicas, and
   after a replica died): wait in the same queue until one is ready (``hold``), for at most
   ``X-Scale-Up-Timeout`` seconds, or ``request_timeout_s`` without the header. ``X-Scale-Up-Timeout: 0``
   asks not to wait: 503 at once.
6. No replica is alive and none can start (start backoff after failed starts, or ``max_warm_replicas``
   reached): the cold path.

Waiting when the queue already holds ``max_queue`` requests is refused: 503 with ``Retry-After``
(``reject``). A request whose replica did not answer (died, or not ready) is routed again: another
ready replica, or the queue until the replacement is ready; never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

CandidateReplica = Literal["none", "starting", "ready"]


class Route(Enum):
    """Where a request goes."""

    WARM = "warm"
    CANDIDATE = "candidate"
    HOLD = "hold"
    QUEUE = "queue"
    COLD = "cold"
    REJECT = "reject"


@dataclass(frozen=True)
class Snapshot:
    """What one routing decision reads.

    Attributes
    ----------
    other_version : bool
        The request names a version other than the pinned one.
    asks_candidate : bool
        That version is the live canary's candidate.
    canary_pick : bool
        A canary is live and this request is in its share.
    candidate_replica : {"none", "starting", "ready"}
        The candidate's replica (``none``: no candidate, or its replica is gone).
    idle, ready, starting : int
        Replicas of the pinned version: ready and idle, ready, starting.
    can_start : bool
        A replica can be started now (no start backoff, ``max_warm_replicas`` not reached).
    waiting, max_queue : int
        Requests waiting for a replica, and the most that may.
    hold_s : float or None
        ``X-Scale-Up-Timeout`` in seconds (None when absent).
    """

    other_version: bool = False
    asks_candidate: bool = False
    canary_pick: bool = False
    candidate_replica: CandidateReplica = "none"
    idle: int = 0
    ready: int = 0
    starting: int = 0
    can_start: bool = True
    waiting: int = 0
    max_queue: int = 64
    hold_s: float | None = None


def route(snap: Snapshot) -> Route:
    """Where the request described by ``snap`` goes (the rules in the module docstring).

    >>> route(Snapshot(idle=1, ready=1)).value, route(Snapshot(ready=1)).value, route(Snapshot(starting=1)).value
    ('warm', 'queue', 'hold')
    """
    if snap.other_version:
        return Route.CANDIDATE if snap.asks_candidate and snap.candidate_replica == "ready" else Route.COLD
    if snap.canary_pick and snap.candidate_replica != "starting":
        return Route.CANDIDATE
    if snap.idle:
        return Route.WARM
    full = snap.waiting >= snap.max_queue
    if snap.ready:
        return Route.REJECT if full else Route.QUEUE
    if snap.starting or snap.can_start:
        return Route.REJECT if full or snap.hold_s == 0 else Route.HOLD
    return Route.COLD
