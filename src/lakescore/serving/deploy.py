"""Redeploying an endpoint to another version (``POST /deploy``).

:class:`Deployer` starts as many replicas of the new version as are live now (role ``next``; the
candidate's replica is adopted when it holds that version), switches traffic once one is ready, then
drains and stops the old replicas. A version with feature lookups reads its feature tables in a new
generation that only the deploy's replicas join until the deploy succeeds
(:mod:`lakescore.serving.replicas.feature_generations`). One deploy runs at a time; one that fails, is
refused or cancelled after it started replicas stops them and is audited ``ml.deploy.failed``, and
the old version keeps serving; a successful one is audited ``ml.deploy``.

The switch itself (the endpoint's plan, its columns, what the scaler and the candidates hold) is the
endpoint's: the deployer calls ``switch(plan)`` once a replica of the new version is ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from lakescore.errors import ServingConflictError, ServingError
from lakescore.serving.plan import EndpointPlan, alias_version, certified_columns, model_task
from lakescore.serving.policy.autoscaler import Autoscaler
from lakescore.serving.policy.candidates import Candidates
from lakescore.serving.policy.health import HEALTH_INTERVAL_S, REPLICA_START_TIMEOUT_S
from lakescore.serving.replicas.backend import FeatureGeneration
from lakescore.serving.replicas.feature_generations import FeatureGenerations
from lakescore.serving.replicas.pool import Replica, ReplicaPool
from lakescore.serving.state.store import ServingState

StartReplica = Callable[..., Awaitable[Replica | None]]
"""``await start_replica(role, version, *, features=None) -> Replica | None`` (None: ``max_warm_replicas`` reached)."""


class Deployer:
    """Carries out the redeploys of one endpoint.

    Parameters
    ----------
    served : callable
        ``served() -> EndpointPlan``: the plan the endpoint serves now.
    switch : callable
        ``switch(plan)``: serve ``plan`` from now on (called once a replica of its version is ready).
    pool : ReplicaPool
    generations : FeatureGenerations
        The feature rows each version's replicas join.
    candidates : Candidates
        A candidate of the new version gives its replicas; one of another version is retired.
    autoscaler : Autoscaler
        Its live replicas are the old ones; its ``last_failure`` says why no new replica became ready.
    state : ServingState
        Audit events.
    start_replica, retire : callable
        See :data:`StartReplica`; ``await retire(replica)`` stops a replica now, or once its request is answered.
    """

    def __init__(self, *, served: Callable[[], EndpointPlan], switch: Callable[[EndpointPlan], None],
                 pool: ReplicaPool, generations: FeatureGenerations, candidates: Candidates, autoscaler: Autoscaler,
                 state: ServingState, start_replica: StartReplica,
                 retire: Callable[[Replica], Awaitable[None]]) -> None:
        self._served, self._switch = served, switch
        self.pool, self.generations, self.candidates, self.autoscaler = pool, generations, candidates, autoscaler
        self.state = state
        self._start_replica, self._retire = start_replica, retire
        self.deploying: int | None = None

    async def deploy(self, version: int) -> dict[str, Any]:
        """Serve ``version`` instead: start as many replicas of it as are live now (the candidate's replica
        is adopted when it holds that version), switch traffic once one is ready, then drain and stop
        the old replicas. A request is answered by whichever version's replica took it, and its reply names
        that version; requests waiting for a replica take the new ones (checked again against the new
        version's columns; one that asked for the old version by number is answered on the cold
        path). A candidate of another version is retired (its shadow and canary compared it with the
        old version). A deploy that fails, is refused or cancelled after it started replicas stops them
        (none is left with role ``next``) and is audited ``ml.deploy.failed``; a successful one
        ``ml.deploy``.

        Parameters
        ----------
        version : int
            The registered model version to serve.

        Returns
        -------
        dict
            ``endpoint``, ``version``, ``previous_version``, ``replicas_started`` (started by this
            deploy), ``adopted_replicas`` (the candidate's, already running), ``drained_replicas``,
            ``switched_after_s`` (seconds from the call to the switch), ``pinned_by``, and
            ``feature_tables`` when ``version`` joins feature lookups.

        Raises
        ------
        ServingConflictError
            ``version`` is already served, another deploy is under way, or ``max_warm_replicas`` leaves no
            room for a replica of it.
        ModelNotFoundError, UncertifiedModelError
            The version does not exist or has no certificate.
        ServingError
            No replica of ``version`` became ready; the old version keeps serving.
        """
        plan = self._served()
        if self.deploying is not None:
            raise ServingConflictError(f"a deploy to v{self.deploying} is under way; wait for it, then deploy again")
        if version == plan.version and not self.generations.joins(version):
            raise ServingConflictError(f"endpoint {plan.name} already serves v{version}")
        self.deploying = version
        try:
            return await self._deploy(version)
        except BaseException as err:  # the old version keeps serving; the audit says why the deploy failed
            self.state.audit("ml.deploy.failed", plan.name, version=version, previous_version=self._served().version,
                             error=f"{type(err).__name__}: {err}")
            raise
        finally:
            self.deploying = None

    async def _deploy(self, version: int) -> dict[str, Any]:
        started = time.monotonic()
        plan = self._served()
        uri = plan.uri(version)
        columns = await asyncio.to_thread(certified_columns, uri)
        task = await asyncio.to_thread(model_task, uri)
        alias = await asyncio.to_thread(alias_version, plan.model_name, plan.alias)
        specs = await self.generations.specs(version)
        # the feature tables at their current versions, read in a new generation that only this deploy's
        # replicas join until it succeeds (a failed deploy leaves the served rows, and later replicas, as they were)
        loaded = await self.generations.load(version, specs) if specs else None
        old = self.autoscaler.live()
        fresh = [] if specs else self.candidates.adopt(version)  # a candidate's replica holds older rows
        adopted = len(fresh)
        try:
            await self._start_next(version, fresh, wanted=max(len(old), 1) if old else 0, features=loaded)
        except BaseException:  # failed, refused or cancelled: no replica is left with role "next"
            for replica in self.pool.of("next"):  # one deploy at a time: every "next" replica is this one's
                await self._retire(replica)
            if loaded is not None:  # its holder goes (with its last replica)
                await self.generations.discard(loaded)
            raise
        if loaded is not None:
            await self.generations.install(version, loaded)
        previous = self._served().version
        new = self._served().deployed(version, input_columns=columns, task=task, alias_version=alias, lookups=specs)
        self._switch(new)
        generation = self.generations.current(version)
        old = [c for c in self.pool.of("serve")  # with any the scaler started meanwhile
               if c.version != version or (generation is not None and c.feature_generation != generation.generation)]
        for replica in fresh:
            replica.role = "serve"
        for replica in old:
            await self._retire(replica)  # a busy replica finishes its request first (draining)
        await self.pool.changed()  # waiting requests take the new replicas
        if self.candidates.candidate is not None:  # its shadow and canary compare against the old version
            await self.candidates.retire_candidate(reason=f"endpoint {new.name} now serves v{version}")
        if previous != version and self.generations.joins(previous):  # its feature rows go with its last replica
            await self.generations.release(previous)
        report = {"version": version, "previous_version": previous, "replicas_started": len(fresh) - adopted,
                  "adopted_replicas": adopted, "drained_replicas": len(old), "pinned_by": new.selection,
                  "switched_after_s": round(time.monotonic() - started, 3),
                  **({"feature_tables": generation.tables} if generation is not None else {})}
        self.state.audit("ml.deploy", new.name, **report)
        return {"endpoint": new.name, **report}

    async def _start_next(self, version: int, fresh: list[Replica], *, wanted: int,
                          features: FeatureGeneration | None = None) -> None:
        """Start replicas of ``version`` (role ``next``, joining ``features`` when given) until ``fresh``
        holds ``wanted``, then wait until one is ready.

        Raises
        ------
        ServingConflictError
            ``wanted`` replicas were asked for and ``max_warm_replicas`` left room for none.
        ServingError
            No replica of ``version`` became ready.
        """
        while len(fresh) < wanted:
            replica = await self._start_replica("next", version, features=features)
            if replica is None:
                break
            fresh.append(replica)
        if wanted and not fresh:
            raise ServingConflictError(f"cannot start a replica of v{version}: max_warm_replicas "
                                       f"{self._served().settings.max_warm_replicas} replicas are resident across "
                                       "endpoints; stop one or raise the limit")
        if fresh and not await self._first_ready(fresh):
            plan = self._served()
            why = self.autoscaler.last_failure or "see the replica logs"
            raise ServingError(f"no replica of v{version} became ready ({why}); "
                               f"endpoint {plan.name} keeps serving v{plan.version}")

    async def _first_ready(self, replicas: list[Replica]) -> bool:
        """Wait until one of ``replicas`` is ready (True), or all are gone or REPLICA_START_TIMEOUT_S passed."""
        deadline = time.monotonic() + REPLICA_START_TIMEOUT_S
        while time.monotonic() < deadline:
            alive = [c for c in replicas if c.replica_id in self.pool.replicas]
            if any(c.state == "ready" for c in alive):
                return True
            if not alive:
                return False
            await asyncio.sleep(HEALTH_INTERVAL_S / 2)
        return False
