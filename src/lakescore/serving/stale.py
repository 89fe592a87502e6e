"""Whether an endpoint is stale: one that follows the registry alias (``model_selection: champion``)
is, once the alias points at another version than the one it resolved when it started; one pinned in
serving.yml or by a deploy never is (a restart would serve the same version).
"""

from __future__ import annotations

import asyncio
from typing import Callable

from lakescore.serving.plan import EndpointPlan, alias_version
from lakescore.serving.state import ServingState


class StaleCheck:
    """The stale mark of one endpoint (``reason``: empty when it is not stale).

    Parameters
    ----------
    served : callable
        ``served() -> EndpointPlan``: the plan the endpoint serves now (a deploy replaces it).
    state : ServingState
        Audit events (``ml.endpoint.stale``, once per new reason).
    """

    def __init__(self, *, served: Callable[[], EndpointPlan], state: ServingState) -> None:
        self._served, self.state = served, state
        self.reason = ""

    async def check(self) -> None:
        """Read the alias and mark or clear the endpoint's stale reason. A check that a deploy
        overtakes while it reads the registry decides nothing; the next one reads again."""
        plan = self._served()
        if not plan.follows_alias:
            self.reason = ""
            return
        champion = await asyncio.to_thread(alias_version, plan.model_name, plan.alias)
        if self._served() is not plan:
            return
        if champion is not None and champion != plan.version:
            reason = (f"{plan.alias} is v{champion}; this endpoint still serves v{plan.version}, resolved "
                      f"when it started. Redeploy with `lakescore serve --deploy {champion}` to serve it.")
            if reason != self.reason:
                self.state.audit("ml.endpoint.stale", plan.name, serving=plan.version, champion=champion)
            self.reason = reason
        else:
            self.reason = ""
