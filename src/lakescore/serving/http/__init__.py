"""What an endpoint speaks over HTTP, at both ends: the wire format, the app's replies, the
``Idempotency-Key`` digest and claims, and the client callers use.

- ``wire``: request parsing and validation, JSON replies with nulls (also what a replica's channel carries);
- ``responses``: the app's JSON responses, the token check and the bounded body read;
- ``idempotency``: request digests that bind an ``Idempotency-Key`` to one request, and its claims;
- ``client``: retries, hold header, idempotency keys and the token header for callers.

The app itself (:mod:`lakescore.serving.endpoint_app`) stands above the endpoint it serves, beside it.
"""
