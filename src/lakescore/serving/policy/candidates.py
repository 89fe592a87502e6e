"""Choosing a candidate version: shadow (mirror only), canary (a share of real traffic), and the
automatic rollback — the one action the platform takes on its own. Shadowing never promotes;
adopting a candidate is the ordinary redeploy.

:class:`Candidates` owns the candidate of one endpoint: its replica (started and retired through the
endpoint's callables), the shadow tally and mirroring, and the canary window and rollback. Both
sides are counted by one rule (:func:`lakescore.serving.policy.canary.verdict`): a request counts against
a side only when that side answered it badly (a model error, a timeout of a ready replica); a request
re-routed because a replica died, was starting or was gone counts for neither side. A canary
candidate's replica that dies is replaced; one whose replicas keep dying is rolled back
(:func:`lakescore.serving.policy.canary.deaths_reason`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lakescore.errors import EndpointUnavailableError, ServingConflictError
from lakescore.serving.plan import EndpointPlan, input_columns, model_task, saved_description
from lakescore.serving.policy.canary import CanaryWindow, Side, Verdict, verdict
from lakescore.serving.policy.routing import CandidateReplica
from lakescore.serving.policy.shadow import Kind, ShadowTally, check_comparable, compared_columns
from lakescore.serving.replicas.pool import Replica, ReplicaPool, Role
from lakescore.serving.state.store import ServingState

Ask = Callable[[Replica, bytes], Awaitable[tuple[str, Any]]]


@dataclass(frozen=True)
class Candidate:
    """The chosen candidate version (shadow, then maybe canary)."""

    version: int
    task: str
    columns: dict[str, str]


class Candidates:
    """Shadow and canary of one endpoint.

    Parameters
    ----------
    plan : EndpointPlan
    pool : ReplicaPool
        The endpoint's replicas (the candidate's replica has role ``candidate``).
    state : ServingState
        Audit events.
    start_replica, retire : callable
        ``await start_replica(role, version) -> Replica | None`` and ``await retire(replica)``.
    ask : callable
        ``await ask(replica, body) -> ("ok", rows) | ("unavailable", detail) | ("error", Reply)``.
    columns : dict
        Input columns by version; a chosen candidate's are added.
    lookup_specs : callable
        ``await lookup_specs(version)``: reads a version's feature lookup specs into the endpoint's
        (:meth:`lakescore.serving.replicas.feature_generations.FeatureGenerations.specs`); a chosen
        candidate's are read before its replica starts, so the replica is forked with its feature rows.
    """

    def __init__(self, plan: EndpointPlan, *, pool: ReplicaPool, state: ServingState,
                 start_replica: Callable[[Role, int], Awaitable[Replica | None]],
                 retire: Callable[[Replica], Awaitable[None]], ask: Ask, columns: dict[int, dict[str, str]],
                 lookup_specs: Callable[[int], Awaitable[Any]]) -> None:
        self.plan, self.s, self.pool, self.state = plan, plan.settings, pool, state
        self._start_replica, self._retire, self._ask = start_replica, retire, ask
        self.columns = columns
        self._lookup_specs = lookup_specs
        self.candidate: Candidate | None = None
        self.shadow: ShadowTally | None = None
        self.canary: CanaryWindow | None = None
        self.note = ""
        self.last_rollback: dict[str, Any] | None = None
        self.failures = 0
        self.rerouted = 0
        self._mirroring = 0

    # --- choosing ----------------------------------------------------------------------------

    async def choose_candidate(self, version: int) -> dict[str, Any]:
        """Start a shadow of ``version`` (retiring any earlier candidate and its totals).

        Raises
        ------
        ServingConflictError
            The version is the served one, its task cannot be compared, or ``max_warm_replicas`` is reached.
        ModelNotFoundError
            The version does not exist.
        """
        if version == self.plan.version:
            raise ServingConflictError(f"v{version} is the version this endpoint serves; choose another candidate")
        uri = self.plan.uri(version)
        columns = await asyncio.to_thread(input_columns, uri)
        task = await asyncio.to_thread(model_task, uri)
        check_comparable(task, version)
        compared = await self._compared(version)
        await self._lookup_specs(version)
        await self.retire_candidate(reason=f"replaced by candidate v{version}")
        if await self._start_replica("candidate", version) is None:
            raise ServingConflictError(f"cannot start candidate v{version}: max_warm_replicas "
                                       f"{self.s.max_warm_replicas} replicas are resident across endpoints; stop one "
                                       "or raise the limit")
        self.candidate = Candidate(version, task, columns)
        self.columns[version] = columns
        self.shadow = ShadowTally(version, self.plan.version, task, self.s.shadow.rtol, self.s.shadow.atol,
                                  columns=compared)
        self.note = ""
        self.state.audit("ml.shadow.start", self.plan.name, candidate_version=version, served_version=self.plan.version)
        return self.summary()

    async def _compared(self, version: int) -> dict[str, Kind]:
        """The columns a shadow of ``version`` compares: those of its answer that the served version's
        answer has too (:func:`lakescore.serving.policy.shadow.compared_columns`; the candidate's kind)."""
        candidate = compared_columns(await asyncio.to_thread(saved_description, self.plan.uri(version)))
        served = compared_columns(await asyncio.to_thread(saved_description, self.plan.model_uri))
        compared = {c: kind for c, kind in candidate.items() if c in served}
        if not compared:
            raise ServingConflictError(
                f"candidate v{version} answers {', '.join(candidate) or 'no comparable column'} and the served "
                f"v{self.plan.version} answers {', '.join(served) or 'no comparable column'}: no column in common, "
                "so a shadow has nothing to compare. Evaluate this candidate offline, then redeploy.")
        return compared

    async def retire_candidate(self, *, reason: str) -> None:
        """Stop the candidate's replica and forget it (audited ``ml.shadow.stop``; shadowing never promotes)."""
        if self.candidate is None:
            return
        for replica in self.pool.of("candidate"):
            await self._retire(replica)
        self._forget(reason=reason)

    def _forget(self, *, reason: str) -> None:
        summary = self.shadow.summary() if self.shadow else {}
        if self.canary is not None:
            self.state.audit("ml.canary.stop", self.plan.name, reason=reason, **self.canary.summary())
        self.state.audit("ml.shadow.stop", self.plan.name, reason=reason, **summary)
        self.candidate, self.shadow, self.canary = None, None, None

    async def start_canary(self, *, version: int | None = None, share_percent: int | None = None) -> dict[str, Any]:
        """Send ``share_percent`` of requests to the candidate for real (its replica stays warm; the
        canary figures start fresh, the shadow totals stay).

        Raises
        ------
        ServingConflictError
            When no candidate is chosen and no ``version`` is given.
        """
        if version is not None and (self.candidate is None or self.candidate.version != version):
            await self.choose_candidate(version)
        if self.candidate is None:
            raise ServingConflictError('no candidate is chosen: POST /shadow {"version": N} first, or pass '
                                       '{"version": N} to /canary')
        share = share_percent if share_percent is not None else self.s.canary.share_percent
        if not 1 <= share <= 100:
            raise ServingConflictError(f"share_percent must be a whole per cent between 1 and 100; got {share}")
        self.canary = CanaryWindow(self.candidate.version, share, self.s.canary.window_s)
        self.state.audit("ml.canary.start", self.plan.name, candidate_version=self.candidate.version,
                         share_percent=share)
        if not self.pool.of("candidate", "starting", "ready", "failed"):  # the shadow's replica died
            await self.replace_replica()
        return self.summary()

    # --- answering ---------------------------------------------------------------------------

    def replica_state(self) -> CandidateReplica:
        """The candidate's replica as routing sees it: ready, starting, or none (no candidate, or gone)."""
        states = {c.state for c in self.pool.of("candidate")}
        return "ready" if "ready" in states else ("starting" if "starting" in states else "none")

    def pick(self) -> bool:
        """Whether the next request is in the live canary's share (advances its counter)."""
        return self.canary is not None and self.canary.take()

    def count(self, side: Side, what: Verdict) -> None:
        """Count one request of ``side`` in the live canary's window
        (:func:`lakescore.serving.policy.canary.verdict`)."""
        if self.canary is not None:
            self.canary.record(side, what, now=time.monotonic())
            if what == "rerouted":
                self.rerouted += 1

    async def answer(self, body: bytes) -> tuple[list[dict[str, Any]], int] | None:
        """The candidate's rows and the version of the replica that gave them, or None (production then
        answers, and the request counts no further): after counting a failure (a model error, or its
        ready replica ran over ``request_timeout_s``), or a reroute (no ready replica, its queue is full, or
        its replica died mid-request or while the request waited for it; counted for neither side).

        A request waits for a busy candidate replica only while one is ready and the canary it was
        drawn for is live: once none is (it died, and its replacement is still starting; or a
        rollback stopped the candidate), production answers at once rather than after
        ``request_timeout_s``."""
        canary = self.canary
        if canary is None:
            return None

        def gone() -> bool:
            return self.canary is not canary or not self.pool.of("candidate", "ready")

        try:
            replica = await self.pool.acquire("candidate", wait_s=self.s.request_timeout_s, give_up=gone) \
                if self.pool.of("candidate", "ready") else None
        except EndpointUnavailableError:  # max_queue requests already wait: production answers
            replica = None
        outcome, value = ("unavailable", "no ready candidate replica") if replica is None \
            else await self._ask(replica, body)
        what = verdict(outcome, status=value.status if outcome == "error" else None)  # type: ignore[arg-type, union-attr]  # an outcome of _ask; value is a response on 'error'
        self.count("candidate", what)
        if what == "failed":
            self.failures += 1
        if outcome == "unavailable" and replica is not None and replica.state == "ready":
            replica.state, replica.detail = "failed", value  # no request until the health pass sees it ready again
        await self._maybe_roll_back(canary)
        return (value, replica.version) if outcome == "ok" and replica is not None else None  # type: ignore[return-value]  # value is the answer's rows on 'ok'

    async def replica_lost(self, replica: Replica, detail: str) -> None:
        """A replica of either side died or failed to start (the health pass dropped it): counted in the
        live canary's window (:func:`lakescore.serving.policy.canary.deaths_reason`). A candidate's replica is
        replaced while a canary is live, unless its deaths roll it back; without a canary it is
        noted (the shadow counts its mirror failures)."""
        side: Side = "candidate" if replica.role == "candidate" else "production"
        canary = self.canary
        if canary is not None:
            canary.record(side, "died", now=time.monotonic())
        if side == "production":
            return
        self.note = f"candidate replica {replica.replica_id} failed: {detail}"
        if canary is None or self.candidate is None or replica.version != self.candidate.version:
            return
        await self._maybe_roll_back(canary)
        if self.canary is canary and not self.pool.of("candidate", "starting", "ready", "failed"):
            await self.replace_replica()

    async def replace_replica(self) -> None:
        """Start another replica of the candidate (its replica died, or was over ``memory_limit_mb``); with
        no room (``max_warm_replicas``) the candidate is stopped, with the reason."""
        if self.candidate is None:
            return
        if await self._start_replica("candidate", self.candidate.version) is None:
            await self.retire_candidate(reason=f"its replica could not be replaced: max_warm_replicas "
                                               f"{self.s.max_warm_replicas} replicas are resident across endpoints")

    def wants_mirror(self, *, version: Any, by_candidate: bool) -> ShadowTally | None:
        """The shadow to mirror an answered request to: a shadow without canary, for a production answer."""
        if self.shadow is not None and self.canary is None and not by_candidate and version == self.plan.version:
            return self.shadow
        return None

    async def mirror(self, tally: ShadowTally, body: bytes, served_rows: list[dict[str, Any]], *,
                     request_id: str) -> None:
        """Ask the candidate the same request and compare. A mirror waits for the candidate's replica
        only while fewer than ``max_queue`` mirrors wait; otherwise it takes the replica when idle or is
        skipped (``max_queue: 0``: mirrors never wait)."""
        wait_s = self.s.request_timeout_s if self._mirroring < self.s.max_queue else 0.0
        self._mirroring += 1
        try:
            try:
                replica = await self.pool.acquire("candidate", wait_s=wait_s) if self.pool.of("candidate") else None
            except EndpointUnavailableError:  # the queue is full of requests: they go first
                replica = None
            if replica is None and wait_s == 0:
                tally.skipped += 1
                return
            outcome, value = ("unavailable", "") if replica is None else await self._ask(replica, body)
            if outcome == "ok":
                tally.add(served_rows, value, request_id=request_id)  # type: ignore[arg-type]  # value is the answer's rows on 'ok'
            else:
                tally.mirror_failures += 1
        finally:
            self._mirroring -= 1

    async def _maybe_roll_back(self, canary: CanaryWindow) -> None:
        reason = canary.check(max_gap=self.s.canary.max_failure_rate_gap, min_requests=self.s.canary.min_requests)
        if reason is None or self.canary is not canary:
            return
        self.last_rollback = {"at": time.time(), "reason": reason, **canary.summary()}
        self.state.audit("ml.canary.rollback", self.plan.name, reason=reason, **canary.summary())
        self.canary = None
        await self.retire_candidate(reason=f"canary rolled back: {reason}")

    def adopt(self, version: int) -> list[Replica]:
        """Hand the candidate's replicas to a redeploy of ``version`` (role ``next``) and forget the
        candidate (audited ``ml.shadow.stop``); no replicas when the candidate is another version."""
        if self.candidate is None or self.candidate.version != version:
            return []
        replicas = [c for c in self.pool.of("candidate") if c.state in ("starting", "ready")]
        for replica in replicas:
            replica.role = "next"
        self._forget(reason=f"adopted by the deploy of v{version}")
        return replicas

    def summary(self) -> dict[str, Any]:
        """The candidate's part of the endpoint's status."""
        return {"candidate_version": self.candidate.version if self.candidate else None,
                "shadow": self.shadow.summary() if self.shadow else None,
                "canary": self.canary.summary() if self.canary else None,
                "last_rollback": self.last_rollback, "note": self.note}
