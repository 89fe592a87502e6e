"""The copies of one endpoint and the one notion of "quietest".

A request goes to the ready, idle copy that has gone longest without one; the scaler stops that
same copy when it scales down. Copies answer one request at a time, so a request that finds every
ready copy busy waits in a bounded queue (``max_queue``; 503 when full).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Iterable, Literal

from lakescore.errors import EndpointUnavailableError

Role = Literal["serve", "candidate"]


@dataclass
class Copy:
    """One running copy as the endpoint sees it (mutable: the endpoint updates it).

    Attributes
    ----------
    state : {"starting", "ready", "draining", "failed"}
        ``draining``: takes no new request and is stopped once idle.
    last_done : float
        ``time.monotonic()`` when its last request finished (its start time until then).
    """

    copy_id: str
    version: int
    role: Role
    address: str
    started_at: float = field(default_factory=time.monotonic)
    state: str = "starting"
    detail: str = ""
    busy: bool = False
    last_done: float = field(default_factory=time.monotonic)
    requests: int = 0
    failures: int = 0
    rss_bytes: int | None = None
    pss_bytes: int | None = None
    pid: int | None = None

    @property
    def memory_bytes(self) -> int | None:
        """What ``memory_limit_mb`` is checked against: proportional memory when known, else RSS."""
        return self.pss_bytes or self.rss_bytes

    def summary(self, now: float) -> dict[str, object]:
        return {"copy_id": self.copy_id, "version": self.version, "role": self.role, "state": self.state,
                "detail": self.detail, "busy": self.busy, "requests": self.requests, "failures": self.failures,
                "idle_s": None if self.busy else round(now - self.last_done, 1), "pid": self.pid,
                "resident_mb": None if self.rss_bytes is None else round(self.rss_bytes / 2**20, 1),
                "proportional_mb": None if self.pss_bytes is None else round(self.pss_bytes / 2**20, 1),
                "address": self.address}


def quietest(copies: Iterable[Copy]) -> Copy | None:
    """The ready, idle copy that has gone longest without a request (ties: lowest id), or None.

    >>> a, b = Copy("a", 1, "serve", "", state="ready", last_done=5.0), Copy("b", 1, "serve", "", state="ready", last_done=2.0)
    >>> quietest([a, b]).copy_id
    'b'
    """
    idle = [c for c in copies if c.state == "ready" and not c.busy]
    return min(idle, key=lambda c: (c.last_done, c.copy_id), default=None)


def to_stop(copies: Iterable[Copy]) -> Copy | None:
    """The copy a scale-down stops: the quietest, else (all busy) the one idle longest before its
    current request; a starting copy before either (it has served nobody yet)."""
    live = [c for c in copies if c.state in ("starting", "ready")]
    starting = [c for c in live if c.state == "starting"]
    if starting:
        return max(starting, key=lambda c: (c.started_at, c.copy_id))
    return quietest(live) or min(live, key=lambda c: (c.last_done, c.copy_id), default=None)


class CopyPool:
    """The endpoint's copies and the queue of requests waiting for one.

    Parameters
    ----------
    max_queue : int
        Most requests that may wait for a copy at once; one more is refused with 503.
    retry_after_s : int
        ``Retry-After`` sent when the queue is full.
    """

    def __init__(self, *, max_queue: int, retry_after_s: int) -> None:
        self.copies: dict[str, Copy] = {}
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        self.waiting = 0
        self._changed = asyncio.Condition()

    def of(self, role: Role, *states: str) -> list[Copy]:
        """Copies of ``role`` (in any of ``states`` when given)."""
        return [c for c in self.copies.values() if c.role == role and (not states or c.state in states)]

    async def changed(self) -> None:
        """Wake the requests waiting for a copy (a copy became ready, idle, or went away)."""
        async with self._changed:
            self._changed.notify_all()

    async def acquire(self, role: Role, *, wait_s: float) -> Copy | None:
        """Take the quietest ready copy of ``role``, waiting up to ``wait_s`` seconds for one.

        Returns
        -------
        Copy or None
            The copy, now busy (give it back with :meth:`release`); None when none was ready in time.

        Raises
        ------
        EndpointUnavailableError
            When ``max_queue`` requests are already waiting.
        """
        async with self._changed:
            chosen = quietest(self.of(role))
            if chosen is None and wait_s > 0:
                if self.waiting >= self.max_queue:
                    raise EndpointUnavailableError(
                        f"{self.waiting} requests are already waiting for a copy (max_queue "
                        f"{self.max_queue}); retry after {self.retry_after_s} s or raise replicas.max",
                        retry_after_s=self.retry_after_s)
                self.waiting += 1
                try:
                    await asyncio.wait_for(self._changed.wait_for(lambda: quietest(self.of(role)) is not None),
                                           timeout=wait_s)
                    chosen = quietest(self.of(role))
                except asyncio.TimeoutError:
                    chosen = None
                finally:
                    self.waiting -= 1
            if chosen is not None:
                chosen.busy = True
            return chosen

    async def release(self, copy: Copy, *, failed: bool = False) -> None:
        """Give a copy back after a request (``failed``: it did not answer)."""
        async with self._changed:
            copy.busy = False
            copy.last_done = time.monotonic()
            copy.requests += 1
            copy.failures += int(failed)
            self._changed.notify_all()
