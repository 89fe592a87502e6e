"""The health of an endpoint's replicas: one pass reads every replica's status through the backend and
carries out what it shows.

A starting replica that answers its health check is marked ready (and so is a failed one that answers
again, unless it failed ``MAX_REPLICA_STRIKES`` requests in a row); a replica that failed, stopped, or is
not ready ``REPLICA_START_TIMEOUT_S`` after it started (unless it waits for room in the cluster) is
dropped and audited ``ml.replica.failed``; a drained replica is stopped; a ready replica whose proportional
memory (resident when unknown) grew above ``memory_limit_mb`` is replaced (``ml.replica.replaced``),
and one that is above it as soon as it is ready is a configuration problem, said once
(``ml.replica.memory_limit``). This pass never starts a serve replica itself: the scaler does, so
``replicas.max`` holds.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from lakescore.serving.policy.autoscaler import Autoscaler
from lakescore.serving.policy.candidates import Candidates
from lakescore.serving.replicas.backend import ReplicaBackend
from lakescore.serving.replicas.pool import Replica, ReplicaPool
from lakescore.serving.state.store import ServingState

HEALTH_INTERVAL_S = 0.5
REPLICA_START_TIMEOUT_S = 300.0
MAX_REPLICA_STRIKES = 3  # requests in a row a replica may fail before it is replaced, not made ready again
MEMORY_SETTLE_S = 60.0  # a replica over memory_limit_mb this soon after it became ready can never fit


class ReplicaHealth:
    """The health pass of one endpoint's replicas.

    Parameters
    ----------
    endpoint : str
        The endpoint's name (audit events).
    memory_limit_mb : int
        A ready replica above this proportional memory (MiB; resident when unknown) is replaced.
    pool : ReplicaPool
    backend : ReplicaBackend
        Reads each replica's status.
    state : ServingState
        Audit events.
    autoscaler : Autoscaler
        Told when a serve replica is ready or lost, and why a replica failed.
    candidates : Candidates
        Its note names a candidate replica that failed.
    counts : Counter
        The endpoint's counters (``replicas_failed``, ``replaced_over_memory`` are added to).
    retire, stop_replica : callable
        ``await retire(replica)`` (now, or once its request is answered) and ``await stop_replica(replica)`` (now).
    """

    def __init__(self, endpoint: str, *, memory_limit_mb: int, pool: ReplicaPool, backend: ReplicaBackend,
                 state: ServingState, autoscaler: Autoscaler, candidates: Candidates, counts: Counter[str],
                 retire: Callable[[Replica], Awaitable[None]], stop_replica: Callable[[Replica], Awaitable[None]]) -> None:
        self.endpoint, self.memory_limit_mb = endpoint, memory_limit_mb
        self.pool, self.backend, self.state = pool, backend, state
        self.autoscaler, self.candidates, self.counts = autoscaler, candidates, counts
        self._retire, self._stop_replica = retire, stop_replica
        self.unfit: set[int] = set()  # versions whose replicas are over memory_limit_mb from the start
        self.memory_note = ""

    async def check(self) -> None:
        """Read every replica's status: mark ready ones (a failed replica that answers again too), drop
        failed ones, stop drained ones, and replace any whose proportional memory (RSS when unknown)
        is above ``memory_limit_mb``."""
        limit = self.memory_limit_mb * 2**20
        for replica in list(self.pool.replicas.values()):
            if self.pool.replicas.get(replica.replica_id) is not replica:
                continue  # retired (scaler, deploy) while an earlier replica was read: not a failure
            status = await asyncio.to_thread(self.backend.status, replica.replica_id, fresh=replica.state == "failed")
            if self.pool.replicas.get(replica.replica_id) is not replica:
                continue
            replica.rss_bytes = status.rss_bytes or replica.rss_bytes
            replica.pss_bytes = status.pss_bytes or replica.pss_bytes
            replica.pid = status.pid or replica.pid
            now = time.monotonic()
            if status.state in ("failed", "stopped"):
                await self._lost(replica, status.detail)
            elif replica.state == "starting" and _start_overdue(replica, status.detail):
                await self._lost(replica, f"not ready {REPLICA_START_TIMEOUT_S:g} s after it started ({status.detail})")
            elif replica.state == "failed" and status.state == "ready" and replica.strikes >= MAX_REPLICA_STRIKES:
                await self._lost(replica, f"failed {replica.strikes} requests in a row ({replica.detail})")
            elif replica.state in ("starting", "failed") and status.state == "ready":
                await self.pool.mark_ready(replica, now=now)
                if replica.role == "serve":
                    self.autoscaler.replica_ready()
            elif replica.state in ("starting", "failed"):
                replica.detail = status.detail or replica.detail
                if replica.state == "failed" and now - replica.last_done > REPLICA_START_TIMEOUT_S:
                    await self._lost(replica, f"did not answer for {REPLICA_START_TIMEOUT_S:g} s ({status.detail})")
            elif replica.state == "draining" and not replica.busy:
                await self._stop_replica(replica)
            elif replica.state == "ready" and replica.role != "next" and replica.memory_bytes and replica.memory_bytes > limit:
                await self._over_memory(replica, now)

    async def _over_memory(self, replica: Replica, now: float) -> None:
        """A ready replica is above ``memory_limit_mb``. Within ``MEMORY_SETTLE_S`` of becoming ready it
        holds what its version needs, so no replacement could fit: said once per version (audited
        ``ml.replica.memory_limit``, ``memory_limit_note`` in the status) and the replica keeps serving. A
        replica that grew past the limit later is retired, and its replacement started by the scaler
        (serve replicas: within ``replicas.max``, one start per pass, the start backoff) or by the
        candidate (its one replica)."""
        memory_mb = round((replica.memory_bytes or 0) / 2**20, 1)
        measured = "proportional" if replica.pss_bytes else "resident"
        if replica.ready_at is not None and now - replica.ready_at <= MEMORY_SETTLE_S:
            if replica.version in self.unfit:
                return
            self.unfit.add(replica.version)
            self.memory_note = (
                f"a replica of v{replica.version} holds {memory_mb} MB ({measured}) {now - replica.ready_at:.0f} s after it "
                f"became ready, above memory_limit_mb {self.memory_limit_mb}: a replacement would not fit either, "
                f"so replicas of v{replica.version} are kept, not replaced; raise memory_limit_mb to at least "
                f"{math.ceil(memory_mb * 1.25)}")
            self.counts["over_memory_limit_at_start"] += 1
            self.state.audit("ml.replica.memory_limit", self.endpoint, replica_id=replica.replica_id, version=replica.version,
                             memory_mb=memory_mb, measured=measured, memory_limit_mb=self.memory_limit_mb,
                             reason=self.memory_note)
            return
        self.state.audit("ml.replica.replaced", self.endpoint, replica_id=replica.replica_id, memory_mb=memory_mb,
                         measured=measured, memory_limit_mb=self.memory_limit_mb)
        self.counts["replaced_over_memory"] += 1
        await self._retire(replica)
        if replica.role == "serve":
            self.autoscaler.kick()  # the scaler starts the replacement: the one place serve replicas start
        else:
            await self.candidates.replace_replica()

    async def _lost(self, replica: Replica, detail: str) -> None:
        self.counts["replicas_failed"] += 1
        self.autoscaler.last_failure = f"{replica.role} replica {replica.replica_id}: {detail}"
        if replica.state == "starting" and replica.role == "serve":  # it never served: back off before the next one
            self.autoscaler.start_failed()
        self.state.audit("ml.replica.failed", self.endpoint, replica_id=replica.replica_id, role=replica.role,
                         version=replica.version, detail=detail)
        await self._stop_replica(replica)
        if replica.role == "serve":
            self.autoscaler.kick()  # replace it now, not at the next interval
        if replica.role in ("serve", "candidate"):
            await self.candidates.replica_lost(replica, detail)  # the canary counts deaths on both sides
        # a deploy's ("next") replica: the deploy reports it (last_replica_failure names the role)


def _start_overdue(replica: Replica, detail: str) -> bool:
    """A replica still starting after REPLICA_START_TIMEOUT_S is failed, unless it is waiting for room in
    the cluster (a pending pod is waiting, not failing)."""
    waiting = detail.startswith("waiting for room in the cluster")
    return not waiting and time.monotonic() - replica.started_at > REPLICA_START_TIMEOUT_S
