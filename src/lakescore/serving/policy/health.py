"""The health of an endpoint's copies: one pass reads every copy's status through the backend and
carries out what it shows.

A starting copy that answers its health check is marked ready (and so is a failed one that answers
again, unless it failed ``MAX_COPY_STRIKES`` requests in a row); a copy that failed, stopped, or is
not ready ``COPY_START_TIMEOUT_S`` after it started (unless it waits for room in the cluster) is
dropped and audited ``ml.copy.failed``; a drained copy is stopped; a ready copy whose proportional
memory (resident when unknown) grew above ``memory_limit_mb`` is replaced (``ml.copy.replaced``),
and one that is above it as soon as it is ready is a configuration problem, said once
(``ml.copy.memory_limit``). This pass never starts a serve copy itself: the scaler does, so
``replicas.max`` holds.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from typing import Awaitable, Callable

from lakescore.serving.policy.autoscaler import Autoscaler
from lakescore.serving.replicas.backend import ReplicaBackend
from lakescore.serving.policy.candidates import Candidates
from lakescore.serving.replicas.pool import Copy, CopyPool
from lakescore.serving.state.store import ServingState

HEALTH_INTERVAL_S = 0.5
COPY_START_TIMEOUT_S = 300.0
MAX_COPY_STRIKES = 3  # requests in a row a copy may fail before it is replaced, not made ready again
MEMORY_SETTLE_S = 60.0  # a copy over memory_limit_mb this soon after it became ready can never fit


class CopyHealth:
    """The health pass of one endpoint's copies.

    Parameters
    ----------
    endpoint : str
        The endpoint's name (audit events).
    memory_limit_mb : int
        A ready copy above this proportional memory (MiB; resident when unknown) is replaced.
    pool : CopyPool
    backend : ReplicaBackend
        Reads each copy's status.
    state : ServingState
        Audit events.
    autoscaler : Autoscaler
        Told when a serve copy is ready or lost, and why a copy failed.
    candidates : Candidates
        Its note names a candidate copy that failed.
    counts : Counter
        The endpoint's counters (``copies_failed``, ``replaced_over_memory`` are added to).
    retire, stop_copy : callable
        ``await retire(copy)`` (now, or once its request is answered) and ``await stop_copy(copy)`` (now).
    """

    def __init__(self, endpoint: str, *, memory_limit_mb: int, pool: CopyPool, backend: ReplicaBackend,
                 state: ServingState, autoscaler: Autoscaler, candidates: Candidates, counts: Counter[str],
                 retire: Callable[[Copy], Awaitable[None]], stop_copy: Callable[[Copy], Awaitable[None]]) -> None:
        self.endpoint, self.memory_limit_mb = endpoint, memory_limit_mb
        self.pool, self.backend, self.state = pool, backend, state
        self.autoscaler, self.candidates, self.counts = autoscaler, candidates, counts
        self._retire, self._stop_copy = retire, stop_copy
        self.unfit: set[int] = set()  # versions whose copies are over memory_limit_mb from the start
        self.memory_note = ""

    async def check(self) -> None:
        """Read every copy's status: mark ready ones (a failed copy that answers again too), drop
        failed ones, stop drained ones, and replace any whose proportional memory (RSS when unknown)
        is above ``memory_limit_mb``."""
        limit = self.memory_limit_mb * 2**20
        for copy in list(self.pool.copies.values()):
            if self.pool.copies.get(copy.copy_id) is not copy:
                continue  # retired (scaler, deploy) while an earlier copy was read: not a failure
            status = await asyncio.to_thread(self.backend.status, copy.copy_id, fresh=copy.state == "failed")
            if self.pool.copies.get(copy.copy_id) is not copy:
                continue
            copy.rss_bytes = status.rss_bytes or copy.rss_bytes
            copy.pss_bytes = status.pss_bytes or copy.pss_bytes
            copy.pid = status.pid or copy.pid
            now = time.monotonic()
            if status.state in ("failed", "stopped"):
                await self._lost(copy, status.detail)
            elif copy.state == "starting" and _start_overdue(copy, status.detail):
                await self._lost(copy, f"not ready {COPY_START_TIMEOUT_S:g} s after it started ({status.detail})")
            elif copy.state == "failed" and status.state == "ready" and copy.strikes >= MAX_COPY_STRIKES:
                await self._lost(copy, f"failed {copy.strikes} requests in a row ({copy.detail})")
            elif copy.state in ("starting", "failed") and status.state == "ready":
                await self.pool.mark_ready(copy, now=now)
                if copy.role == "serve":
                    self.autoscaler.copy_ready()
            elif copy.state in ("starting", "failed"):
                copy.detail = status.detail or copy.detail
                if copy.state == "failed" and now - copy.last_done > COPY_START_TIMEOUT_S:
                    await self._lost(copy, f"did not answer for {COPY_START_TIMEOUT_S:g} s ({status.detail})")
            elif copy.state == "draining" and not copy.busy:
                await self._stop_copy(copy)
            elif copy.state == "ready" and copy.role != "next" and copy.memory_bytes and copy.memory_bytes > limit:
                await self._over_memory(copy, now)

    async def _over_memory(self, copy: Copy, now: float) -> None:
        """A ready copy is above ``memory_limit_mb``. Within ``MEMORY_SETTLE_S`` of becoming ready it
        holds what its version needs, so no replacement could fit: said once per version (audited
        ``ml.copy.memory_limit``, ``memory_limit_note`` in the status) and the copy keeps serving. A
        copy that grew past the limit later is retired, and its replacement started by the scaler
        (serve copies: within ``replicas.max``, one start per pass, the start backoff) or by the
        candidate (its one copy)."""
        memory_mb = round((copy.memory_bytes or 0) / 2**20, 1)
        measured = "proportional" if copy.pss_bytes else "resident"
        if copy.ready_at is not None and now - copy.ready_at <= MEMORY_SETTLE_S:
            if copy.version in self.unfit:
                return
            self.unfit.add(copy.version)
            self.memory_note = (
                f"a copy of v{copy.version} holds {memory_mb} MB ({measured}) {now - copy.ready_at:.0f} s after it "
                f"became ready, above memory_limit_mb {self.memory_limit_mb}: a replacement would not fit either, "
                f"so copies of v{copy.version} are kept, not replaced; raise memory_limit_mb to at least "
                f"{math.ceil(memory_mb * 1.25)}")
            self.counts["over_memory_limit_at_start"] += 1
            self.state.audit("ml.copy.memory_limit", self.endpoint, copy_id=copy.copy_id, version=copy.version,
                             memory_mb=memory_mb, measured=measured, memory_limit_mb=self.memory_limit_mb,
                             reason=self.memory_note)
            return
        self.state.audit("ml.copy.replaced", self.endpoint, copy_id=copy.copy_id, memory_mb=memory_mb,
                         measured=measured, memory_limit_mb=self.memory_limit_mb)
        self.counts["replaced_over_memory"] += 1
        await self._retire(copy)
        if copy.role == "serve":
            self.autoscaler.kick()  # the scaler starts the replacement: the one place serve copies start
        else:
            await self.candidates.replace_copy()

    async def _lost(self, copy: Copy, detail: str) -> None:
        self.counts["copies_failed"] += 1
        self.autoscaler.last_failure = f"{copy.role} copy {copy.copy_id}: {detail}"
        if copy.state == "starting" and copy.role == "serve":  # it never served: back off before the next one
            self.autoscaler.start_failed()
        self.state.audit("ml.copy.failed", self.endpoint, copy_id=copy.copy_id, role=copy.role,
                         version=copy.version, detail=detail)
        await self._stop_copy(copy)
        if copy.role == "serve":
            self.autoscaler.kick()  # replace it now, not at the next interval
        if copy.role in ("serve", "candidate"):
            await self.candidates.copy_lost(copy, detail)  # the canary counts deaths on both sides
        # a deploy's ("next") copy: the deploy reports it (last_copy_failure names the role)


def _start_overdue(copy: Copy, detail: str) -> bool:
    """A copy still starting after COPY_START_TIMEOUT_S is failed, unless it is waiting for room in
    the cluster (a pending pod is waiting, not failing)."""
    waiting = detail.startswith("waiting for room in the cluster")
    return not waiting and time.monotonic() - copy.started_at > COPY_START_TIMEOUT_S
