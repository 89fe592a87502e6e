"""Calling an endpoint: hold header, bounded retries with growing waits, one overall deadline, and
an ``Idempotency-Key`` so a retried request is answered once. The retries are tenacity's
(``Retrying``: a fixed wait per retry, stopped by the attempt count, the idempotency rule or the
deadline), on the client's own ``sleep`` and ``clock``.

Profiles (``profile:`` in config/serving.yml; keys under ``client:`` override them):

=============  =========  ======  =========  ========  ==================================
profile        replicas   hold_s  timeout_s  deadline  retries
=============  =========  ======  =========  ========  ==================================
experiment     0-1        600     660        660       waits 15, 30, 60, 120 s
background     0-2        45      60         600       waits 15, 30, 60, 120 s; durable job id
low_latency    1-3        0       30         30        one retry, only if idempotent
=============  =========  ======  =========  ========  ==================================

With a durable job id, the n-th request of a job carries the key ``<job_id>:<n>``, so a job that is
re-run after a crash gets the answers its first run already received, not second ones. A key is
bound to the request it was first sent with: a re-run whose n-th request has other rows gets
:class:`~lakescore.errors.IdempotencyKeyReusedError` (422, not retried), never the first run's
answer to other rows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    stop_any,
    wait_chain,
    wait_fixed,
    wait_none,
)

from lakescore.errors import (
    ConfigError,
    EndpointUnavailableError,
    IdempotencyKeyReusedError,
    LakescoreError,
    RequestError,
    ServingError,
)

RETRYABLE_STATUS = (429, 503)


@dataclass(frozen=True)
class ClientSettings:
    """How a client waits and retries (seconds).

    Attributes
    ----------
    hold_s : float
        Sent as ``X-Scale-Up-Timeout``: how long the endpoint may hold a request while a replica starts
        (0: not sent).
    timeout_s : float
        One attempt's HTTP timeout.
    deadline_s : float
        Overall time for all attempts and waits together.
    retry_waits_s : tuple of float
        Waits before the 1st, 2nd, ... retry of a 503; one retry per entry.
    retry_only_idempotent : bool
        Retry only requests that carry an ``Idempotency-Key``.
    durable_job_id : bool
        A ``job_id`` is required and keys are ``<job_id>:<n>``.
    """

    hold_s: float = 60
    timeout_s: float = 60
    deadline_s: float = 300
    retry_waits_s: tuple[float, ...] = (15, 30, 60, 120)
    retry_only_idempotent: bool = False
    durable_job_id: bool = False

    @classmethod
    def from_config(cls, config: Any) -> ClientSettings:
        """From the ``client:`` block of a :class:`lakescore.config.ServingConfig` (profile applied)."""
        return cls(hold_s=config.hold_s, timeout_s=config.timeout_s, deadline_s=config.deadline_s,
                   retry_waits_s=tuple(config.retry_waits_s), retry_only_idempotent=config.retry_only_idempotent,
                   durable_job_id=config.durable_job_id)


def auth_headers(token: str, auth_header: str = "authorization", workspace_token: str | None = None) -> dict[str, str]:
    """The headers that carry an endpoint's token (see :class:`EndpointClient`).

    Raises
    ------
    ConfigError
        ``auth_header`` is neither ``"authorization"`` nor ``"x-lakescore-token"``, or a
        ``workspace_token`` is given with ``"authorization"`` (both would need that header).
    """
    if auth_header == "authorization":
        if workspace_token is not None:
            raise ConfigError([f"EndpointClient: workspace_token goes in Authorization, which auth_header "
                               f"{auth_header!r} gives to the endpoint's token; pass auth_header='x-lakescore-token'"])
        return {"Authorization": f"Bearer {token}"}
    if auth_header == "x-lakescore-token":
        return {"X-Lakescore-Token": token,
                **({"Authorization": f"Bearer {workspace_token}"} if workspace_token is not None else {})}
    raise ConfigError([f"EndpointClient: auth_header must be 'authorization' or 'x-lakescore-token'; "
                       f"got {auth_header!r}"])


class EndpointClient:
    """A client of one endpoint.

    Parameters
    ----------
    address : str
        ``http://127.0.0.1:<port>``.
    token : str
        The endpoint's token.
    settings : ClientSettings, optional
    auth_header : {"authorization", "x-lakescore-token"}, default "authorization"
        How the token travels: ``Authorization: Bearer <token>``, or ``X-Lakescore-Token: <token>``
        for an endpoint behind the Databricks driver proxy, whose Authorization header must carry a
        workspace token (``workspace_token``).
    workspace_token : str, optional
        With ``auth_header="x-lakescore-token"``: sent as ``Authorization: Bearer <workspace_token>``.
    job_id : str, optional
        Makes idempotency keys durable (``<job_id>:<n>``); required when ``settings.durable_job_id``.
    sleep, clock : callable, optional
        ``time.sleep`` and ``time.monotonic`` (replaceable so waits can be observed).
    """

    def __init__(self, address: str, token: str, *, settings: ClientSettings | None = None,
                 job_id: str | None = None,
                 auth_header: Literal["authorization", "x-lakescore-token"] = "authorization",
                 workspace_token: str | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or ClientSettings()
        if self.settings.durable_job_id and not job_id:
            raise LakescoreError("this profile keeps idempotency keys across re-runs, so it needs a job id: "
                                 "EndpointClient(..., job_id='<stable name of this job run>')")
        self.address = address.rstrip("/")
        self.job_id = job_id
        self._sequence = 0
        self._sleep, self._clock = sleep, clock
        self._http = httpx.Client(base_url=self.address, headers=auth_headers(token, auth_header, workspace_token))
        self.attempts: list[dict[str, Any]] = []

    @classmethod
    def from_home(cls, home: str | Path, endpoint: str, **kwargs: Any) -> EndpointClient:
        """A client of the endpoint running from runtime home ``home`` (reads its address file and
        ``<home>/serving/token``: the address file's ``token_file`` is not followed, so a copied home
        never reads the original's token).

        Raises
        ------
        EndpointUnavailableError
            When no endpoint of that name is running from ``home``.
        """
        from lakescore.serving.run import read_endpoint

        info = read_endpoint(home, endpoint)
        if info is None:
            raise EndpointUnavailableError(f"no endpoint {endpoint!r} is running from {home}; start it with "
                                           "`lakescore serve`")
        token = Path(home) / "serving" / "token"  # this home's (ensure_token), whatever path the file recorded
        return cls(info["address"], token.read_text().strip(), **kwargs)

    def close(self) -> None:
        self._http.close()

    def _key(self, given: str | None, idempotent: bool) -> str | None:
        if not idempotent:
            return None
        self._sequence += 1
        if given:
            return given
        return f"{self.job_id}:{self._sequence}" if self.job_id else uuid.uuid4().hex

    def predict(self, rows: list[dict[str, Any]], *, model_version: int | None = None,
                idempotency_key: str | None = None, idempotent: bool = True) -> dict[str, Any]:
        """Score ``rows`` (one dict per row), retrying 503s within the deadline.

        Returns
        -------
        dict
            The endpoint's reply: ``predictions`` (one per row, with ``model_version`` and ``served``).

        Raises
        ------
        IdempotencyKeyReusedError
            The key was first used with other rows (422); not retried.
        RequestError
            The endpoint refused the input (4xx); not retried.
        EndpointUnavailableError
            Still 503 (or unreachable) after the retries or the deadline.
        ServingError
            Any other failed answer.
        """
        s = self.settings
        body: dict[str, Any] = {"dataframe_records": rows}
        if model_version is not None:
            body["model_version"] = model_version
        key = self._key(idempotency_key, idempotent)
        headers = {"Idempotency-Key": key} if key else {}
        started = self._clock()
        self.attempts = []

        def attempt() -> dict[str, Any] | str:
            remaining = s.deadline_s - (self._clock() - started)
            hold = min(s.hold_s, max(remaining - 1, 0), max(s.timeout_s - 1, 0))
            sent = {**headers, **({"X-Scale-Up-Timeout": f"{hold:g}"} if hold > 0 else {})}
            return self._attempt(body, sent, timeout=min(s.timeout_s, max(remaining, 0.1)))

        def record(state: RetryCallState) -> None:
            self.attempts.append({"attempt": state.attempt_number - 1, "outcome": state.outcome.result(), "key": key})  # type: ignore[union-attr]  # after an attempt the outcome is set

        def unavailable(state: RetryCallState) -> NoReturn:
            raise EndpointUnavailableError(
                f"{self.address} did not answer after {len(self.attempts)} attempt(s) within deadline_s "
                f"{s.deadline_s:g} ({self.attempts[-1]['outcome']}); retry later or use a profile with a longer hold")

        retrying = Retrying(
            retry=retry_if_result(lambda why: isinstance(why, str)),  # a str says why the attempt may be retried
            wait=wait_chain(*map(wait_fixed, s.retry_waits_s)) if s.retry_waits_s else wait_none(),
            stop=stop_any(stop_after_attempt(len(s.retry_waits_s) + 1),
                          lambda state: key is None and s.retry_only_idempotent,  # type: ignore[arg-type]  # tenacity takes a plain callable of the state
                          # the next wait would end at or past the deadline (on this client's clock)
                          lambda state: self._clock() - started + state.upcoming_sleep >= s.deadline_s),  # type: ignore[arg-type]  # as above
            after=record, sleep=self._sleep, retry_error_callback=unavailable)
        return dict(retrying(attempt))  # type: ignore[arg-type]  # attempt returns the answer's dict once retrying stops

    def deploy(self, version: int, *, timeout_s: float = 600.0) -> dict[str, Any]:
        """``POST /deploy {"version": version}``: the endpoint starts replicas of ``version``, switches
        traffic once one is ready, then drains and stops the old replicas.

        Parameters
        ----------
        version : int
            Registered version to serve.
        timeout_s : float, default 600
            Seconds to wait for the switch (replicas load and verify the version first).

        Returns
        -------
        dict
            The endpoint's deploy report: ``version``, ``previous_version``, ``switched_after_s``, ...

        Raises
        ------
        RequestError
            The endpoint refused the version (4xx: unknown version, no certificate, already serving it).
        ServingError
            The new replicas could not start; the endpoint keeps serving the old version.
        """
        try:
            resp = self._http.post("/deploy", json={"version": version}, timeout=timeout_s)
        except httpx.TransportError as err:
            raise EndpointUnavailableError(f"{self.address} did not answer the deploy ({type(err).__name__}: {err}); "
                                           "check that `lakescore serve` is running") from err
        payload = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        if resp.status_code == 200:
            return dict(payload)
        message = f"{resp.status_code} {payload.get('error_code', '')}: {payload.get('message', resp.text[:300])}"
        if 400 <= resp.status_code < 500:
            raise RequestError(message, http_status=resp.status_code)
        raise ServingError(message)

    def _attempt(self, body: dict[str, Any], headers: dict[str, str], *, timeout: float) -> dict[str, Any] | str:
        """The reply, or why this attempt may be retried."""
        try:
            resp = self._http.post("/invocations", json=body, headers=headers, timeout=timeout)
        except httpx.TransportError as err:
            return f"{type(err).__name__}: {err}"
        if resp.status_code == 200:
            return dict(resp.json())
        if resp.status_code in RETRYABLE_STATUS:
            return f"{resp.status_code} Retry-After {resp.headers.get('retry-after', '-')}"
        try:
            payload = resp.json()
        except ValueError:
            payload = {"message": resp.text[:300]}
        message = f"{resp.status_code} {payload.get('error_code', '')}: {payload.get('message', '')}"
        if payload.get("error_code") == IdempotencyKeyReusedError.code:
            key = headers.get("Idempotency-Key", "")
            durable = self.job_id is not None and key.startswith(f"{self.job_id}:")
            hint = (f" Keys of job {self.job_id!r} are '{self.job_id}:<n>': a re-run must send the same rows in "
                    "the same order; give a different run a new job_id.") if durable else ""
            raise IdempotencyKeyReusedError(message + hint, key=key)
        if 400 <= resp.status_code < 500:
            raise RequestError(message, http_status=resp.status_code)
        raise ServingError(message)
