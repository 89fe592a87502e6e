"""``Idempotency-Key``: one key answers one request, once; another request under it is refused.

A key is bound to the request it was first used with, through the request's digest: SHA-256 of the
*parsed* request, i.e. ``model_version`` (null when absent) and the rows in a canonical form
(``dataframe_split`` JSON with the columns sorted by name, values coerced to the signature's
types). So ``dataframe_records`` and ``dataframe_split`` of the same rows, another key or column
order or spacing, and ``10`` vs ``10.0`` in a ``double`` column are the same request, and so is an
honest retry after a deploy whose model orders its columns differently; other rows, other values
or another ``model_version`` are not. Headers do not count (a retrying client shrinks its
``X-Scale-Up-Timeout`` from one attempt to the next).

- the same key with the same request: the kept answer is replayed (``Idempotent-Replayed: true``);
- the same key with another request: 422 ``idempotency_key_reused``, naming the key;
- concurrent first uses of one key: :class:`KeyClaims` lets one request score; one with the same
  digest waits for that answer and replays it, one with another digest gets the 422 at once.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING

import orjson

from lakescore.errors import IdempotencyKeyReusedError

if TYPE_CHECKING:
    from lakescore.serving.http.wire import ScoreRequest

Kept = tuple[int, bytes]  # (HTTP status, JSON body) of an answer kept for a key


def request_digest(request: ScoreRequest) -> str:
    """The digest that binds an ``Idempotency-Key`` to one request.

    Parameters
    ----------
    request : ScoreRequest
        The validated request: its rows and the version it asked for (None when it asked for none).

    Returns
    -------
    str
        64 hex digits: SHA-256 of ``b"model_version=<N or null>\\n"`` followed by the rows as
        ``{"dataframe_split": {"columns": [...], "data": [[...], ...]}}`` (orjson, no spaces), the
        columns sorted by name and each row's values in that order.
    """
    version = b"null" if request.model_version is None else str(request.model_version).encode()
    names = sorted(request.values)
    rows = [list(row) for row in zip(*(request.values[name] for name in names))]
    canonical = orjson.dumps({"dataframe_split": {"columns": names, "data": rows}})
    return hashlib.sha256(b"model_version=" + version + b"\n" + canonical).hexdigest()


def check_same_request(endpoint: str, key: str, kept_digest: str, digest: str) -> None:
    """Refuse a request whose digest differs from the one its key was first used with.

    Raises
    ------
    IdempotencyKeyReusedError
        When ``digest != kept_digest`` (HTTP 422); the message names the endpoint and the key.
    """
    if digest != kept_digest:
        raise IdempotencyKeyReusedError(
            f"Idempotency-Key {key!r} on endpoint {endpoint!r} was first used for another request (request "
            f"digest {kept_digest[:12]}, this one {digest[:12]}): other rows, values or model_version. Send "
            "each different request with its own key (keys are kept 24 h); a retry must send the same rows.",
            key=key, endpoint=endpoint)


class KeyClaims:
    """The keys whose first request is being answered in this process, with that request's digest.

    Not thread-safe: used from the endpoint's event loop only (no ``await`` between the look-up and
    the claim in :meth:`wait_turn`, so two requests cannot both claim a key).
    """

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._held: dict[str, tuple[str, asyncio.Future[Kept | None]]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._held

    async def wait_turn(self, key: str, digest: str) -> Kept | None:
        """Claim ``key`` for this request, or wait for the request that holds it.

        Returns
        -------
        (int, bytes) or None
            The answer the holder kept (same digest: replay it), or None once this request holds
            the key (then call :meth:`release` when it is answered). When the holder ends without a
            kept answer, the next waiter claims the key, so one request at a time is scored.

        Raises
        ------
        IdempotencyKeyReusedError
            When the request holding ``key`` has another digest.
        """
        while (held := self._held.get(key)) is not None:
            check_same_request(self.endpoint, key, held[0], digest)
            kept = await asyncio.shield(held[1])
            if kept is not None:
                return kept
        self._held[key] = (digest, asyncio.get_running_loop().create_future())
        return None

    def release(self, key: str, kept: Kept | None) -> None:
        """Give ``key`` up; waiters replay ``kept``, or (None: nothing kept) the next one claims it."""
        _, done = self._held.pop(key)
        if not done.done():
            done.set_result(kept)
