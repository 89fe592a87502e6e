"""One endpoint: the facade that wires its parts together and carries their decisions out.

- the replica pool (:mod:`lakescore.serving.replicas.pool`): replicas, the quietest-replica rule, the bounded queue,
  measured start times; this module starts and stops replicas through the backend;
- replica health (marks replicas ready, drops failed ones, replaces those over ``memory_limit_mb``):
  :class:`lakescore.serving.policy.health.ReplicaHealth`;
- where a request goes: the pure :func:`lakescore.serving.policy.routing.route` (the rules are in that
  module's docstring); :meth:`Endpoint.answer` carries the route out;
- scaling: :class:`lakescore.serving.policy.autoscaler.Autoscaler`;
- shadow, canary and mirroring: :class:`lakescore.serving.policy.candidates.Candidates`;
- redeploys: :class:`lakescore.serving.deploy.Deployer` (the switch itself is here);
- the feature rows each version's replicas join:
  :class:`lakescore.serving.replicas.feature_generations.FeatureGenerations`;
- the stale mark: :class:`lakescore.serving.policy.stale.StaleCheck`;
- after the reply: the rows are recorded (:mod:`lakescore.serving.state.recorder`) and, with a shadow,
  mirrored.

A request whose replica does not answer (it died mid-request, or is not ready) is routed again, up to
``MAX_REPLICA_ATTEMPTS`` replicas: another ready replica, or the queue until the replacement is ready. Only
then (a request that takes every replica down) does the cold path answer it.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from lakescore.errors import EndpointUnavailableError, ModelNotFoundError, RequestError
from lakescore.serving import forkserver
from lakescore.serving.deploy import Deployer
from lakescore.serving.drift import DriftReference, check_rows
from lakescore.serving.features import FeatureReader
from lakescore.serving.http.wire import ScoreRequest, parse_request
from lakescore.serving.plan import EndpointPlan
from lakescore.serving.policy.autoscaler import Autoscaler
from lakescore.serving.policy.canary import Outcome, verdict
from lakescore.serving.policy.candidates import Candidates
from lakescore.serving.policy.health import HEALTH_INTERVAL_S, ReplicaHealth
from lakescore.serving.policy.routing import Route, Snapshot, route
from lakescore.serving.policy.stale import StaleCheck
from lakescore.serving.replicas.backend import FeatureGeneration, ReplicaBackend
from lakescore.serving.replicas.channel import ChannelError, ReplicaChannels
from lakescore.serving.replicas.cold import score_cold
from lakescore.serving.replicas.feature_generations import FeatureGenerations
from lakescore.serving.replicas.pool import Replica, ReplicaPool, Role
from lakescore.serving.replicas.replica import trim_memory
from lakescore.serving.state.recorder import Answered, PredictionRecorder, RecordBatch
from lakescore.serving.state.store import ServingState

MAX_REPLICA_ATTEMPTS = 3


@dataclass(frozen=True)
class Reply:
    """What the endpoint answers: HTTP status, JSON payload, headers, and the answered rows."""

    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] | None = None
    by_candidate: bool = False


class Endpoint:
    """An endpoint holding ``plan.version`` in replicas started through ``backend``.

    Parameters
    ----------
    plan : EndpointPlan
    backend : ReplicaBackend
    state : ServingState
        Audit events, resident replicas and idempotent replies.
    write : callable
        ``write(batch)``: appends a :class:`lakescore.serving.state.recorder.RecordBatch` of the inference
        table's records once (one dict per answered row, see
        :class:`lakescore.serving.state.recorder.PredictionRecorder`).
    reference : callable, optional
        Called once, in the background, to build the drift reference from the training rows
        (None: rows are recorded with drift_check ``no_reference``).
    features : FeatureReader, optional
        Reads a lookup version's feature tables (in its feature holder, and on the cold path);
        needed to serve a version with feature lookups.
    """

    def __init__(self, plan: EndpointPlan, *, backend: ReplicaBackend, state: ServingState,
                 write: Callable[[RecordBatch], None], reference: Callable[[], DriftReference] | None = None,
                 features: FeatureReader | None = None) -> None:
        self.plan, self.s, self.backend, self.state = plan, plan.settings, backend, state
        self.reference = reference
        self.generations = FeatureGenerations(endpoint=plan.name, model_name=plan.model_name, uri=plan.uri,
                                              backend=backend, state=state, reader=features,
                                              lookups={plan.version: tuple(plan.lookups)})
        self.pool = ReplicaPool(max_queue=self.s.max_queue, retry_after_s=self.s.retry_after_s)
        self.recorder = PredictionRecorder(write=write, state=state, endpoint=plan.name, model_name=plan.model_name,
                                           flush_rows=self.s.record_flush_rows,
                                           drift=lambda rows: check_rows(self.drift, rows))
        self.columns: dict[int, dict[str, str]] = {plan.version: plan.input_columns}
        self.autoscaler = Autoscaler(plan.name, plan.version, self.s, pool=self.pool, state=state,
                                     start_replica=self._start_replica, retire=self._retire,
                                     held_elsewhere=lambda: self._cold_waiting,
                                     refused=lambda version: self.stale.refusal(version))
        self.candidates = Candidates(plan, pool=self.pool, state=state, start_replica=self._start_replica,
                                     retire=self._retire, ask=self._ask, columns=self.columns,
                                     lookup_specs=self.generations.specs)
        self.channels = ReplicaChannels(timeout_s=self.s.request_timeout_s)
        self.counts: Counter[str] = Counter()
        self.health = ReplicaHealth(plan.name, memory_limit_mb=self.s.memory_limit_mb, pool=self.pool, backend=backend,
                                 state=state, autoscaler=self.autoscaler, candidates=self.candidates,
                                 counts=self.counts, retire=self._retire, stop_replica=self._stop_replica)
        self.deployer = Deployer(served=lambda: self.plan, switch=self._switch, pool=self.pool,
                                 generations=self.generations, candidates=self.candidates,
                                 autoscaler=self.autoscaler, state=state, start_replica=self._start_replica,
                                 retire=self._retire)
        self.stale = StaleCheck(served=lambda: self.plan, state=state)
        self.loop_error = ""
        self.drift: DriftReference | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._cold = asyncio.Semaphore(self.s.cold_max_concurrent)
        self._cold_waiting = 0
        self._seq = 0
        self._background: set[asyncio.Task[Any]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Read a lookup version's feature tables, start ``replicas.min`` replicas and the health,
        scale, sampling, stale and flush loops.

        Raises
        ------
        ServingError
            The version joins feature lookups and its feature tables cannot be read.
        """
        await self.generations.ensure(self.plan.version)
        n = self.s.replicas.min
        for _ in range(n):
            await self._start_replica("serve", self.plan.version)
        self.autoscaler.desired = n
        if n:
            self.state.audit("ml.scale", self.plan.name, action="up", replicas_before=0, replicas_after=n,
                             reason=f"started with {n} replica{'' if n == 1 else 's'} (replicas.min)",
                             requests_per_min=0.0)
        for loop in (self._health_loop, self.autoscaler.scale_loop, self.autoscaler.sample_loop, self._stale_loop,
                     self._flush_loop):
            self._tasks.append(asyncio.create_task(loop()))
        if self.reference is not None:
            self._tasks.append(asyncio.create_task(self._load_drift_reference()))

    async def stop(self) -> None:
        """Stop every loop and replica, then flush the buffered records."""
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        await asyncio.to_thread(self.backend.stop_all)  # every replica, and the replicas' socket folder
        self.pool.replicas.clear()
        await asyncio.to_thread(self.state.remove_endpoint_replicas, self.plan.name)
        await asyncio.to_thread(self.recorder.flush)
        self.channels.close()

    async def _load_drift_reference(self) -> None:
        if self.reference is None:
            return
        try:
            self.drift = await asyncio.to_thread(self.reference)
            await asyncio.to_thread(trim_memory)  # the training rows are gone; give their pages back
        except Exception as err:  # rows are then recorded with drift_check "no_reference"
            self.counts["drift_reference_errors"] += 1
            self.state.audit("ml.drift.no_reference", self.plan.name, error=f"{type(err).__name__}: {err}")

    # --- replicas ------------------------------------------------------------------------------

    async def _start_replica(self, role: Role, version: int, *,
                             features: FeatureGeneration | None = None) -> Replica | None:
        """Start a replica (None when ``max_warm_replicas`` replicas are resident across endpoints, or the
        version was deleted from the registry); ``features``: the feature generation it joins (a
        deploy's, not installed yet), default the version's current one."""
        if self.stale.refusal(version):
            return None
        resident = await asyncio.to_thread(self.state.resident_replicas)
        if len(resident) >= self.s.max_warm_replicas:
            return None
        if features is None and self.generations.joins(version):  # read when planned, deployed or chosen
            await self.generations.ensure(version)
        self._seq += 1
        replica_id = f"{self.plan.name}-{role}-v{version}-{self._seq}"
        address = await asyncio.to_thread(partial(self.backend.start, replica_id, version, features=features))
        if role == "serve" and version != self.plan.version:  # a deploy switched while it started
            await asyncio.to_thread(self.backend.stop, replica_id)
            return await self._start_replica("serve", self.plan.version)
        replica = Replica(replica_id, version, role, address, pid=self.backend.pid(replica_id))
        self.generations.stamp(replica)
        self.pool.replicas[replica_id] = replica
        await asyncio.to_thread(self.state.add_replica, replica_id, endpoint=self.plan.name, role=role,
                                version=version, pid=replica.pid, address=address)
        return replica

    async def _stop_replica(self, replica: Replica) -> None:
        self.pool.replicas.pop(replica.replica_id, None)
        await self.pool.changed()
        await asyncio.to_thread(self.backend.stop, replica.replica_id)
        await asyncio.to_thread(self.state.remove_replica, replica.replica_id)

    async def _retire(self, replica: Replica) -> None:
        """Stop a replica now, or once its current request is answered."""
        if replica.busy:
            replica.state = "draining"
        else:
            await self._stop_replica(replica)

    async def _health_loop(self) -> None:
        while True:
            try:
                await self.health.check()
            except Exception as err:  # a loop never dies; the status shows the error
                self.counts["health_errors"] += 1
                self.loop_error = f"health check error: {err}"
            await asyncio.sleep(HEALTH_INTERVAL_S)

    async def _stale_loop(self) -> None:
        while True:
            try:
                await self.stale.check()
            except Exception as err:  # keep checking; the status shows the error
                self.loop_error = f"stale check error: {err}"
            await asyncio.sleep(self.s.scale_interval_s)

    # --- redeploy ----------------------------------------------------------------------------

    async def deploy(self, version: int) -> dict[str, Any]:
        """Serve ``version`` instead (``POST /deploy``): returns the report and raises the errors of
        :meth:`lakescore.serving.deploy.Deployer.deploy`; a successful deploy clears the stale mark."""
        report = await self.deployer.deploy(version)
        self.stale.reason = ""
        return report

    def _switch(self, plan: EndpointPlan) -> None:
        """Serve ``plan`` from now on (a deploy's switch): requests, the scaler and the candidates see it."""
        self.columns[plan.version] = plan.input_columns
        self.plan = plan
        self.candidates.plan = plan
        self.autoscaler.version = plan.version

    # --- answering ---------------------------------------------------------------------------

    def _snapshot(self, *, asked: int | None, canary_pick: bool, hold_s: float | None) -> Snapshot:
        serve = self.pool.of("serve")
        canary = self.candidates.canary
        other = asked is not None and asked != self.plan.version
        return Snapshot(other_version=other, asks_candidate=other and canary is not None and asked == canary.version,
                        canary_pick=canary_pick, candidate_replica=self.candidates.replica_state(),
                        idle=sum(c.state == "ready" and not c.busy for c in serve),
                        ready=sum(c.state == "ready" for c in serve),
                        starting=sum(c.state == "starting" for c in serve),
                        can_start=self.autoscaler.can_start(), waiting=self.pool.waiting,
                        max_queue=self.pool.max_queue, hold_s=hold_s)

    async def answer(self, request: ScoreRequest, body: bytes, *, hold_s: float | None) -> Reply:
        """Answer one validated request where :func:`lakescore.serving.policy.routing.route` sends it.

        Parameters
        ----------
        request : ScoreRequest
        body : bytes
            The request as forwarded to a replica.
        hold_s : float or None
            ``X-Scale-Up-Timeout`` (seconds): the longest the request waits for a replica to start;
            None waits up to ``request_timeout_s``; 0 does not wait (503 at once when no replica is ready).

        Raises
        ------
        EndpointUnavailableError
            The queue is full, no replica became ready within the wait, or every replica stayed busy for
            ``request_timeout_s`` (503 with ``Retry-After`` from measured replica starts).
        ServingError
            When the cold path fails.
        ModelNotFoundError
            The version was deleted from the registry and no replica of it is ready (404): no new replica
            or cold-path process of it starts (:meth:`lakescore.serving.policy.stale.StaleCheck.refusal`).
        """
        asked = request.model_version
        pinned = asked is None or asked == self.plan.version
        self.autoscaler.arrived(counted=pinned)
        pick = pinned and self.candidates.pick()
        settled = not pinned  # the canary counts a request once, for the side that took it (canary.verdict)
        attempts, demanded = 0, False
        while True:
            decision = route(self._snapshot(asked=asked, canary_pick=pick, hold_s=hold_s))
            if decision is Route.CANDIDATE:
                answered = await self.candidates.answer(body)  # counted there, whatever happened
                settled = settled or pick
                if answered is not None:  # named by the replica that answered (the candidate may have changed)
                    return self._reply(answered[0], "warm", answered[1], by_candidate=True)
                if asked is not None and asked != self.plan.version:
                    return self._reply(await self._cold_path(asked, body), "cold", asked)
                pick = False  # production answers the request the candidate failed
                continue
            if pick and not settled:  # in the canary's share, but its replica is starting: production answers
                self.candidates.count("candidate", "rerouted")
                settled = True
            if decision is Route.COLD or attempts >= MAX_REPLICA_ATTEMPTS:
                version = self.plan.version if asked is None else asked
                if version == self.plan.version:  # no replica can start now: the scaler tries when it may
                    demanded = self.autoscaler.demand(counted=demanded)
                return self._reply(await self._cold_path(version, self._body_for(request, body, version)),
                                   "cold", version)
            if decision is Route.REJECT:
                self.autoscaler.demand(counted=demanded)  # a refused request at zero replicas still starts one
                raise self._rejected(hold_s)
            if decision is Route.HOLD:
                demanded = self.autoscaler.demand(counted=demanded)
            replica = await self._wait_for_replica(decision, hold_s)
            if replica is None:
                continue
            if asked is not None and replica.version != asked:  # a deploy switched while it waited: the
                await self.pool.release(replica, used=False)  # asked version is answered cold now
                continue
            try:
                sent = self._body_for(request, body, replica.version)
            except RequestError:
                await self.pool.release(replica, used=False)
                raise
            attempts += 1
            outcome, value = await self._ask(replica, sent)
            if not settled:
                what = verdict(outcome, status=value.status if outcome == "error" else None)
                self.candidates.count("production", what)
                settled = True
            replica.strikes = 0 if outcome not in ("unavailable", "timeout") else replica.strikes + 1
            if outcome == "ok":  # the replica's version: a redeploy may have switched while it answered
                return self._reply(value, "warm", replica.version)
            if outcome == "error":
                return value
            self.counts["replica_failures"] += 1
            if replica.state == "ready":
                replica.state, replica.detail = "failed", value  # no request until the health pass sees it ready again

    def _body_for(self, request: ScoreRequest, body: bytes, version: int) -> bytes:
        """``body`` for a replica of ``version``: as it is when the request was checked against that
        version's columns, else checked again (a deploy switched while the request waited).

        Raises
        ------
        RequestError
            400 naming the column when the request does not fit ``version``'s columns.
        """
        columns = self.columns.get(version)
        if columns is None or list(columns.items()) == list(request.types.items()):
            return body
        try:
            return parse_request(body, columns, max_body_bytes=len(body) + 1,
                                 max_rows=max(request.n_rows, 1)).to_body()
        except RequestError as err:
            raise RequestError(f"endpoint {self.plan.name} switched to v{version} while the request waited, and "
                               f"the request does not fit it: {err}", http_status=err.http_status,
                               **err.fields) from err

    async def _wait_for_replica(self, decision: Route, hold_s: float | None) -> Replica | None:
        """A ready replica for a ``warm``, ``queue`` or ``hold`` route (waiting in the bounded queue);
        None when the request is to be routed again (its idle replica was taken first, or it was held
        and no replica can start now)."""
        if decision is Route.HOLD:
            wait_s = self.s.request_timeout_s if hold_s is None else hold_s
            replica = await self.pool.acquire("serve", wait_s=wait_s, give_up=self._cannot_start)
            if replica is None and self._cannot_start():
                return None  # the replica failed to start: routed again, to the cold path
            if replica is None:
                waited = "X-Scale-Up-Timeout" if hold_s is not None else "request_timeout_s"
                raise EndpointUnavailableError(
                    f"no replica of endpoint {self.plan.name} became ready within {waited} {wait_s:g} s; retry after "
                    f"{self.pool.retry_after_s} s, or send a longer X-Scale-Up-Timeout",
                    retry_after_s=self.pool.retry_after_s)
            return replica
        if decision is Route.WARM:  # None: another request took the idle replica first; routed again
            return await self.pool.acquire("serve", wait_s=0)
        replica = await self.pool.acquire("serve", wait_s=self.s.request_timeout_s)
        if replica is None:
            raise EndpointUnavailableError(
                f"every replica of endpoint {self.plan.name} stayed busy for request_timeout_s "
                f"{self.s.request_timeout_s:g} s; retry after {self.pool.retry_after_s} s or raise replicas.max",
                retry_after_s=self.pool.retry_after_s)
        return replica

    def _cannot_start(self) -> bool:
        """No replica of the pinned version is alive and none can start now (routing then says cold)."""
        return not self.autoscaler.live() and not self.autoscaler.can_start()

    def _rejected(self, hold_s: float | None) -> EndpointUnavailableError:
        retry = self.pool.retry_after_s
        if hold_s == 0 and not self.pool.full():
            why = (f"no replica of endpoint {self.plan.name} is ready and X-Scale-Up-Timeout is 0; retry after "
                   f"{retry} s, or send X-Scale-Up-Timeout: <seconds> to wait for one")
        else:
            why = (f"{self.pool.waiting} requests already wait for a replica of endpoint {self.plan.name} (max_queue "
                   f"{self.pool.max_queue}); retry after {retry} s or raise max_queue or replicas.max")
        return EndpointUnavailableError(why, retry_after_s=retry)

    async def _ask(self, replica: Replica, body: bytes) -> tuple[Outcome, Any]:
        """Send a checked body (``ScoreRequest.to_body()``) to a replica over its channel:
        ("ok", rows) | ("timeout", detail) (alive, ran over ``request_timeout_s``) |
        ("unavailable", detail) (died, closed, not listening, not ready) | ("error", Reply)."""
        if len(self.channels) > len(self.pool.replicas):
            self.channels.keep_only({c.address for c in self.pool.replicas.values()})
        failed = True
        try:
            status, payload = await self.channels.score(replica.address, body)
            failed = status >= 500
        except ChannelError as err:
            return ("timeout" if err.timed_out else "unavailable"), str(err)
        finally:  # also when the request is cancelled: the replica is free again
            await self.pool.release(replica, failed=failed)
        try:
            answer = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return "unavailable", f"replica answered {status} without JSON"
        if status == 200:
            return "ok", answer["predictions"]
        if status == 503:
            return "unavailable", answer.get("message", "replica not ready")
        return "error", Reply(status, answer)

    async def _cold_path(self, version: int, body: bytes) -> list[dict[str, Any]]:
        """Score on the cold path: up to ``cold_max_concurrent`` at once; ``max_queue`` bounds only
        the requests that wait for a cold slot, so a free slot answers even with ``max_queue: 0``."""
        refused = self.stale.refusal(version)
        if refused:
            raise ModelNotFoundError(
                f"endpoint {self.plan.name} holds no ready replica of v{version}, and {refused}, nor a cold-path "
                "process; deploy a registered version with `lakescore serve --deploy N`", version=version)
        if self._cold.locked() and self._cold_waiting >= self.s.max_queue:
            raise EndpointUnavailableError(
                f"{self._cold_waiting} requests already wait for the cold path (max_queue {self.s.max_queue}); "
                f"retry after {self.pool.retry_after_s} s", retry_after_s=self.pool.retry_after_s)
        self._cold_waiting += 1
        try:
            await self._cold.acquire()
        finally:
            self._cold_waiting -= 1
        try:
            self.counts["cold"] += 1
            return await score_cold(model_uri=self.plan.uri(version), version=version,
                                    tracking_uri=self.plan.tracking_uri, body=body, timeout_s=self.s.cold_timeout_s,
                                    features=await self.generations.cold(version),
                                    load_uri=await asyncio.to_thread(self.backend.location, version))
        finally:
            self._cold.release()

    def _reply(self, rows: list[dict[str, Any]], served: str, version: int, *, by_candidate: bool = False) -> Reply:
        self.counts[f"served_{served}"] += 1
        payload = {"predictions": rows, "served": served, "model_version": version, "endpoint": self.plan.name}
        return Reply(200, payload, {"X-Served-By": served, "X-Model-Version": str(version)}, rows, by_candidate)

    # --- after the reply ---------------------------------------------------------------------

    def after_reply(self, request: ScoreRequest, body: bytes, reply: Reply, *, request_id: str,
                    received_at: float, latency_ms: float) -> None:
        """Record the answered rows and mirror the request to a shadow (runs after the reply)."""
        if reply.rows is None:
            return
        due = self.recorder.add(Answered(request_id, received_at, request.records(), reply.rows, latency_ms))
        if due:
            self._spawn(asyncio.to_thread(self.recorder.flush))
        tally = self.candidates.wants_mirror(version=reply.payload.get("model_version"), by_candidate=reply.by_candidate)
        if tally is not None:
            self._spawn(self.candidates.mirror(tally, body, reply.rows, request_id=request_id))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.record_flush_interval_s)
            try:
                await asyncio.to_thread(self.recorder.flush)
                await asyncio.to_thread(self.state.forget_replies, older_than_s=86400)
            except Exception as err:  # a loop never dies; the rows stay buffered, the status shows the error
                self.counts["flush_errors"] += 1
                self.loop_error = f"flush error: {type(err).__name__}: {err}"

    # --- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Everything an operator asks: version, stale, replicas (with resident memory), the last
        scale decision, shadow and canary figures, the ``Retry-After`` a 503 would carry now, and
        the recorder."""
        now = time.monotonic()
        ready = self.pool.of("serve", "ready")
        scaler = self.autoscaler
        state = "ready" if ready else ("starting" if scaler.live() else ("scaled to zero" if scaler.desired == 0
                                                                          else "down"))
        counts = Counter(self.counts)
        counts.update({"scale_errors": scaler.errors, "candidate_failures": self.candidates.failures,
                       "canary_rerouted": self.candidates.rerouted})
        candidate = self.candidates.candidate
        return {"endpoint": self.plan.name, "state": state, "model": self.plan.model_uri,
                "version": self.plan.version, "pinned_by": self.plan.selection, "stale": bool(self.stale.reason),
                "stale_reason": self.stale.reason, **scaler.summary(now),
                "replicas": [c.summary(now) for c in self.pool.replicas.values()], "queued": self.pool.waiting,
                "cold_waiting": self._cold_waiting, "retry_after_s": self.pool.retry_after_s,
                "measured_starts_s": list(self.pool.starts.measured),
                "counts": {k: v for k, v in counts.items() if v}, **self.candidates.summary(),
                "loop_error": scaler.last_error or self.loop_error, "memory_limit_note": self.health.memory_note,
                "recorder": self.recorder.summary(), "drift_reference": self.drift is not None,
                "max_warm_replicas": self.s.max_warm_replicas,
                **self.generations.status(self.plan.version, None if candidate is None else candidate.version)}

    def processes(self) -> dict[str, Any]:
        """The processes whose memory ``GET /status`` reports (:func:`lakescore.serving.replicas.memory.footprint`
        reads them from /proc, off the event loop): this endpoint process, its fork server, the
        feature holders of lookup versions, each replica, and any other process under this one."""
        return {"endpoint": os.getpid(), "fork_server": forkserver.server_pid(), "others_under": os.getpid(),
                "feature_holders": self.backend.holder_pids(), "replicas": [c.pid for c in self.pool.replicas.values()]}


def new_request_id() -> str:
    """A fresh request id (32 hex digits)."""
    return uuid.uuid4().hex

