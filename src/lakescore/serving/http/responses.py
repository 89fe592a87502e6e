"""The endpoint's HTTP pieces: JSON responses, the token check, and a bounded body read."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from lakescore.errors import RequestError
from lakescore.serving.http.wire import dumps, error_payload

TOKEN_HEADER = "x-lakescore-token"
UNAUTHORIZED = ("missing or wrong endpoint token; send 'Authorization: Bearer <token>', or "
                "'X-Lakescore-Token: <token>' where Authorization carries another token (the "
                "Databricks driver proxy needs the workspace token there). The token is the file "
                "<runtime home>/serving/token (token_file in <runtime home>/serving/endpoints/"
                "<endpoint>.json; .lakescore/serving/token locally)")


def reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON response (NaN-free) with ``status``."""
    return Response(dumps(payload), status_code=status, media_type="application/json", headers=headers)


def error_reply(err: Exception, headers: dict[str, str] | None = None) -> Response:
    """The JSON error reply for ``err``: ``{"error_code", "message"}`` with the error's HTTP status."""
    status, payload = error_payload(err)
    return reply(status, payload, headers)


def authorized(request: Request, token: str) -> bool:
    """True when the request carries the endpoint's token, compared in constant time: as
    ``X-Lakescore-Token: <token>`` when that header is present (Authorization then belongs to a proxy,
    e.g. the Databricks driver proxy's workspace token), else as ``Authorization: Bearer <token>``."""
    given = request.headers.get(TOKEN_HEADER)
    if given is None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"request body is {int(declared):,} bytes; the limit is {limit:,} (max_body_bytes "
                           "in config/serving.yml). Send fewer rows per request.", http_status=413,
                           limit="max_body_bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"request body is over {limit:,} bytes (max_body_bytes in config/serving.yml). "
                               "Send fewer rows per request.", http_status=413, limit="max_body_bytes")
        chunks.append(chunk)
    return b"".join(chunks)
