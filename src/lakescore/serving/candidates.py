"""Choosing a candidate version: shadow (mirror only), canary (a share of real traffic), and the
automatic rollback — the one action the platform takes on its own. Shadowing never promotes;
adopting a candidate is the ordinary redeploy.

:class:`CandidateControl` is the part of :class:`lakescore.serving.endpoint.Endpoint` that manages
the candidate; it uses the endpoint's copies, audit state and settings.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakescore.errors import ServingConflictError
from lakescore.serving.canary import CanaryWindow
from lakescore.serving.plan import input_columns, model_task
from lakescore.serving.shadow import ShadowTally, check_comparable

if TYPE_CHECKING:  # the endpoint supplies these attributes
    from lakescore.config import ServingConfig
    from lakescore.serving.plan import EndpointPlan
    from lakescore.serving.router import Copy, CopyPool, Role
    from lakescore.serving.state import ServingState


@dataclass(frozen=True)
class Candidate:
    """The chosen candidate version (shadow, then maybe canary)."""

    version: int
    task: str
    columns: dict[str, str]


class CandidateControl:
    """Shadow and canary of one endpoint (mixed into ``Endpoint``)."""

    plan: EndpointPlan
    s: ServingConfig
    state: ServingState
    pool: CopyPool
    candidate: Candidate | None
    shadow: ShadowTally | None
    canary: CanaryWindow | None
    candidate_note: str
    last_rollback: dict[str, Any] | None
    columns: dict[int, dict[str, str]]

    async def _start_copy(self, role: Role, version: int) -> Copy | None:  # provided by Endpoint
        raise NotImplementedError

    async def _retire(self, copy: Copy) -> None:  # provided by Endpoint
        raise NotImplementedError

    async def choose_candidate(self, version: int) -> dict[str, Any]:
        """Start a shadow of ``version`` (retiring any earlier candidate and its totals).

        Raises
        ------
        ServingConflictError
            The version is the served one, its task cannot be compared, or ``max_warm_copies`` is reached.
        ModelNotFoundError
            The version does not exist.
        """
        if version == self.plan.version:
            raise ServingConflictError(f"v{version} is the version this endpoint serves; choose another candidate")
        uri = self.plan.uri(version)
        columns = await asyncio.to_thread(input_columns, uri)
        task = await asyncio.to_thread(model_task, uri)
        check_comparable(task, version)
        await self.retire_candidate(reason=f"replaced by candidate v{version}")
        if await self._start_copy("candidate", version) is None:
            raise ServingConflictError(f"cannot start candidate v{version}: max_warm_copies {self.s.max_warm_copies} "
                                       "copies are resident across endpoints; stop one or raise the limit")
        self.candidate = Candidate(version, task, columns)
        self.columns[version] = columns
        self.shadow = ShadowTally(version, self.plan.version, task, self.s.shadow.rtol, self.s.shadow.atol)
        self.candidate_note = ""
        self.state.audit("ml.shadow.start", self.plan.name, candidate_version=version, served_version=self.plan.version)
        return self.candidate_summary()

    async def retire_candidate(self, *, reason: str) -> None:
        """Stop the candidate's copy and forget it (audited ``ml.shadow.stop``; shadowing never promotes)."""
        if self.candidate is None:
            return
        for copy in self.pool.of("candidate"):
            await self._retire(copy)
        summary = self.shadow.summary() if self.shadow else {}
        if self.canary is not None:
            self.state.audit("ml.canary.stop", self.plan.name, reason=reason, **self.canary.summary())
        self.state.audit("ml.shadow.stop", self.plan.name, reason=reason, **summary)
        self.candidate, self.shadow, self.canary = None, None, None

    async def start_canary(self, *, version: int | None = None, share_percent: int | None = None) -> dict[str, Any]:
        """Send ``share_percent`` of requests to the candidate for real (its copy stays warm; the
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
        return self.candidate_summary()

    async def _maybe_roll_back(self, canary: CanaryWindow) -> None:
        reason = canary.check(max_gap=self.s.canary.max_failure_rate_gap, min_requests=self.s.canary.min_requests)
        if reason is None or self.canary is not canary:
            return
        self.last_rollback = {"at": time.time(), "reason": reason, **canary.summary()}
        self.state.audit("ml.canary.rollback", self.plan.name, reason=reason, **canary.summary())
        self.canary = None
        await self.retire_candidate(reason=f"canary rolled back: {reason}")

    def candidate_summary(self) -> dict[str, Any]:
        return {"candidate_version": self.candidate.version if self.candidate else None,
                "shadow": self.shadow.summary() if self.shadow else None,
                "canary": self.canary.summary() if self.canary else None,
                "last_rollback": self.last_rollback, "note": self.candidate_note}
