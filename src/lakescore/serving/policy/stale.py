"""Whether an endpoint is stale, read from the registry every ``scale_interval_s``:

- the served version was deleted from the registry (any endpoint, pinned or not): the endpoint
  keeps answering with the warm replicas it holds, but starts no new replica of that version, and no
  cold-path process for it either (its files may be gone with it): :meth:`StaleCheck.refusal`;
  a deploy of a registered version ends it;
- it follows the alias (``model_selection: champion``) and the alias points at another version
  than the one it resolved when it started, or no longer resolves (the alias, or the version it
  pointed at, was deleted).

One pinned in serving.yml or by a deploy is stale only when its version is deleted (a restart
would serve the same version). Each new reason is audited once (``ml.endpoint.stale``, with its
``cause``: ``alias_moved``, ``alias_unresolved`` or ``version_deleted``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lakescore.serving.plan import EndpointPlan, RegistryView, registry_view
from lakescore.serving.state.store import ServingState


class StaleCheck:
    """The stale mark of one endpoint (``reason``: empty when it is not stale).

    Parameters
    ----------
    served : callable
        ``served() -> EndpointPlan``: the plan the endpoint serves now (a deploy replaces it).
    state : ServingState
        Audit events (``ml.endpoint.stale``, once per new reason).

    Attributes
    ----------
    reason : str
        Why the endpoint is stale, and what to do; empty when it is not.
    deleted : set of int
        Served versions the registry was seen without: no new replica of them starts.
    """

    def __init__(self, *, served: Callable[[], EndpointPlan], state: ServingState) -> None:
        self._served, self.state = served, state
        self.reason = ""
        self.deleted: set[int] = set()

    def refusal(self, version: int) -> str:
        """Why no new replica (nor cold-path process) of ``version`` may start; empty when it may."""
        if version not in self.deleted:
            return ""
        return f"v{version} was deleted from the registry, so no new replica of it starts"

    async def check(self) -> None:
        """Read the registry and mark or clear the endpoint's stale reason. A check that a deploy
        overtakes while it reads the registry decides nothing; the next one reads again."""
        plan = self._served()
        view = await asyncio.to_thread(registry_view, plan.model_name, plan.version,
                                       alias=plan.alias if plan.follows_alias else None)
        if self._served() is not plan:
            return
        if view.version_registered:
            self.deleted.discard(plan.version)
        else:
            self.deleted.add(plan.version)
        reason, detail = stale_reason(plan, view)
        if reason and reason != self.reason:
            self.state.audit("ml.endpoint.stale", plan.name, serving=plan.version, **detail)
        self.reason = reason


def stale_reason(plan: EndpointPlan, view: RegistryView) -> tuple[str, dict[str, Any]]:
    """The stale reason of an endpoint serving ``plan`` given what the registry says (``""``: not
    stale), and the audit detail (``champion``, ``cause``). A deleted version comes first: it is
    the one that changes what the endpoint can do."""
    champion = view.alias_version
    follows = plan.follows_alias
    if not view.version_registered:
        then = (f"{plan.alias} is v{champion}: `lakescore serve --deploy {champion}` serves it"
                if follows and champion is not None else "deploy a registered version with `lakescore serve "
                                                          "--deploy N`")
        return (f"v{plan.version} was deleted from the registry; this endpoint keeps answering with the warm replicas "
                f"it holds, and starts no new replica of v{plan.version} (its files may be gone). To serve again, "
                f"{then}.", {"champion": champion, "cause": "version_deleted"})
    if not follows:
        return "", {}
    if champion is None:
        return (f"alias {plan.alias} no longer resolves (it, or the version it pointed at, was deleted); this "
                f"endpoint still serves v{plan.version}, resolved when it started. Set the alias again, or "
                "redeploy with `lakescore serve --deploy N`.", {"champion": None, "cause": "alias_unresolved"})
    if champion != plan.version:
        return (f"{plan.alias} is v{champion}; this endpoint still serves v{plan.version}, resolved when it "
                f"started. Redeploy with `lakescore serve --deploy {champion}` to serve it.",
                {"champion": champion, "cause": "alias_moved"})
    return "", {}
