"""The replica pool of one endpoint: its replicas, the one notion of "quietest", the bounded queue of
requests waiting for a replica, and how long a replica takes to start.

A request goes to the ready, idle replica that has gone longest without one; the scaler stops that
same replica when it scales down. Replicas answer one request at a time, so a request that finds every
ready replica busy, or arrives while replicas start, waits in one bounded queue (``max_queue``; 503
when full). ``Retry-After`` on a 503 is derived from measured replica starts (:class:`StartTimes`).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from lakescore.errors import EndpointUnavailableError

Role = Literal["serve", "candidate", "next"]  # next: a redeploy's replicas until traffic switches


@dataclass
class Replica:
    """One running replica as the endpoint sees it (mutable: the endpoint updates it).

    Attributes
    ----------
    state : {"starting", "ready", "draining", "failed"}
        ``draining``: takes no new request and is stopped once idle. ``failed``: did not answer its
        last request; takes no request until the health pass sees it ready again (or drops it).
    last_done : float
        ``time.monotonic()`` when its last request finished (its start time until then).
    strikes : int
        Requests in a row it did not answer (0 after an answer); past a limit the endpoint replaces
        it instead of making it ready again.
    """

    replica_id: str
    version: int
    role: Role
    address: str
    started_at: float = field(default_factory=time.monotonic)
    ready_at: float | None = None  # when it first became ready (``time.monotonic()``)
    state: str = "starting"
    detail: str = ""
    busy: bool = False
    last_done: float = field(default_factory=time.monotonic)
    requests: int = 0
    failures: int = 0
    strikes: int = 0
    rss_bytes: int | None = None
    pss_bytes: int | None = None
    pid: int | None = None
    feature_tables: list[dict[str, object]] | None = None  # a lookup replica's feature versions
    feature_generation: int | None = None  # which read of them (a deploy of a lookup version reads again)

    @property
    def memory_bytes(self) -> int | None:
        """What ``memory_limit_mb`` is checked against: proportional memory when known, else RSS."""
        return self.pss_bytes or self.rss_bytes

    def summary(self, now: float) -> dict[str, object]:
        return {"replica_id": self.replica_id, "version": self.version, "role": self.role, "state": self.state,
                "detail": self.detail, "busy": self.busy, "requests": self.requests, "failures": self.failures,
                "idle_s": None if self.busy else round(now - self.last_done, 1), "pid": self.pid,
                "resident_mb": None if self.rss_bytes is None else round(self.rss_bytes / 2**20, 1),
                "proportional_mb": None if self.pss_bytes is None else round(self.pss_bytes / 2**20, 1),
                "address": self.address,
                **({"feature_tables": self.feature_tables} if self.feature_tables is not None else {})}


def quietest(replicas: Iterable[Replica]) -> Replica | None:
    """The ready, idle replica that has gone longest without a request (ties: lowest id), or None.

    >>> a, b = Replica("a", 1, "serve", "", state="ready", last_done=5.0), Replica("b", 1, "serve", "", state="ready", last_done=2.0)
    >>> quietest([a, b]).replica_id
    'b'
    """
    idle = [c for c in replicas if c.state == "ready" and not c.busy]
    return min(idle, key=lambda c: (c.last_done, c.replica_id), default=None)


def to_stop(replicas: Iterable[Replica]) -> Replica | None:
    """The replica a scale-down stops: the quietest, else (all busy) the one idle longest before its
    current request; a starting replica before either (it has served nobody yet)."""
    live = [c for c in replicas if c.state in ("starting", "ready")]
    starting = [c for c in live if c.state == "starting"]
    if starting:
        return max(starting, key=lambda c: (c.started_at, c.replica_id))
    return quietest(live) or min(live, key=lambda c: (c.last_done, c.replica_id), default=None)


class StartTimes:
    """Measured replica starts (seconds from start to ready) and the ``Retry-After`` they give.

    Parameters
    ----------
    default_s : int
        ``Retry-After`` (seconds) before any start was measured (``retry_after_s`` in serving.yml).
    keep : int, default 5
        How many of the latest starts the median reads.
    """

    def __init__(self, default_s: int, *, keep: int = 5) -> None:
        self.default_s = default_s
        self.measured: deque[float] = deque(maxlen=keep)

    def record(self, seconds: float) -> None:
        """Add one measured start (seconds)."""
        self.measured.append(seconds)

    @property
    def retry_after_s(self) -> int:
        """``ceil(median of the latest starts)``, at least 1 s; ``default_s`` before any start.

        >>> starts = StartTimes(30)
        >>> starts.retry_after_s
        30
        >>> for s in (1.4, 1.7, 9.0): starts.record(s)
        >>> starts.retry_after_s
        2
        """
        if not self.measured:
            return self.default_s
        return max(1, math.ceil(statistics.median(self.measured)))


class ReplicaPool:
    """The endpoint's replicas and the queue of requests waiting for one.

    Parameters
    ----------
    max_queue : int
        Most requests that may wait for a replica at once; one more is refused with 503.
    retry_after_s : int
        ``Retry-After`` (seconds) sent with a 503 before any replica start was measured.
    """

    def __init__(self, *, max_queue: int, retry_after_s: int) -> None:
        self.replicas: dict[str, Replica] = {}
        self.max_queue = max_queue
        self.starts = StartTimes(retry_after_s)
        self.waiting = 0
        self._changed = asyncio.Condition()

    @property
    def retry_after_s(self) -> int:
        """``Retry-After`` for a 503 now (see :class:`StartTimes`)."""
        return self.starts.retry_after_s

    def full(self) -> bool:
        """Whether ``max_queue`` requests already wait for a replica."""
        return self.waiting >= self.max_queue

    async def mark_ready(self, replica: Replica, *, now: float) -> None:
        """A replica answers its health check: it takes requests now. Its first readiness is recorded
        as a measured start; a failed replica that is ready again is not."""
        if replica.state == "starting" and replica.requests == 0:
            self.starts.record(now - replica.started_at)
        if replica.ready_at is None:
            replica.ready_at = now
        replica.state, replica.detail, replica.last_done = "ready", "", now
        await self.changed()

    def of(self, role: Role, *states: str) -> list[Replica]:
        """Replicas of ``role`` (in any of ``states`` when given)."""
        return [c for c in self.replicas.values() if c.role == role and (not states or c.state in states)]

    async def changed(self) -> None:
        """Wake the requests waiting for a replica (a replica became ready, idle, or went away)."""
        async with self._changed:
            self._changed.notify_all()

    async def acquire(self, role: Role, *, wait_s: float,
                      give_up: Callable[[], bool] | None = None) -> Replica | None:
        """Take the quietest ready replica of ``role``, waiting up to ``wait_s`` seconds for one.

        Parameters
        ----------
        role : {"serve", "candidate"}
        wait_s : float
            Longest wait in the queue (seconds); 0 takes an idle replica or none.
        give_up : callable, optional
            Checked whenever the replicas change; the wait ends (None) once it returns True.

        Returns
        -------
        Replica or None
            The replica, now busy (give it back with :meth:`release`); None when none was ready in time.

        Raises
        ------
        EndpointUnavailableError
            When ``max_queue`` requests are already waiting.
        """
        async with self._changed:
            chosen = quietest(self.of(role))
            if chosen is None and wait_s > 0:
                if self.full():
                    raise EndpointUnavailableError(
                        f"{self.waiting} requests are already waiting for a replica (max_queue "
                        f"{self.max_queue}); retry after {self.retry_after_s} s or raise replicas.max",
                        retry_after_s=self.retry_after_s)
                self.waiting += 1
                try:
                    await asyncio.wait_for(self._changed.wait_for(
                        lambda: quietest(self.of(role)) is not None or (give_up is not None and give_up())),
                        timeout=wait_s)
                    chosen = quietest(self.of(role))
                except TimeoutError:
                    chosen = None
                finally:
                    self.waiting -= 1
            if chosen is not None:
                chosen.busy = True
            return chosen

    async def release(self, replica: Replica, *, failed: bool = False, used: bool = True) -> None:
        """Give a replica back after a request (``failed``: it did not answer; ``used=False``: the
        request was not sent to it after all, so nothing is counted)."""
        replica.busy = False  # at once: a cancelled request must not leave its replica busy
        async with self._changed:
            if used:
                replica.last_done = time.monotonic()
                replica.requests += 1
                replica.failures += int(failed)
            self._changed.notify_all()
