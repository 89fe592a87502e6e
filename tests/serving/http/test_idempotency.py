"""Request digests and the in-process claims of ``Idempotency-Key`` (the endpoint's use of them is
tested against a real server in test_endpoint.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from lakescore.errors import IdempotencyKeyReusedError
from lakescore.serving.http.idempotency import KeyClaims, request_digest
from lakescore.serving.http.wire import parse_request

COLUMNS = {"month": "long", "distance": "double", "carrier": "string"}


def digest_of(payload: dict) -> str:
    parsed = parse_request(json.dumps(payload).encode(), COLUMNS, max_body_bytes=10_000, max_rows=10)
    return request_digest(parsed)


def test_the_digest_is_of_the_parsed_rows_and_the_asked_version() -> None:
    records = {"dataframe_records": [{"carrier": "UA", "month": 10, "distance": 500}]}
    split = {"dataframe_split": {"columns": ["distance", "carrier", "month"], "data": [[500.0, "UA", 10.0]]}}
    by_hand = b'model_version=null\n{"dataframe_split":{"columns":["carrier","distance","month"],' \
              b'"data":[["UA",500.0,10]]}}'
    assert digest_of(records) == digest_of(split) == hashlib.sha256(by_hand).hexdigest()
    assert digest_of({**records, "model_version": 2}) == hashlib.sha256(
        by_hand.replace(b"=null", b"=2")).hexdigest()
    other_row = {"dataframe_records": [{"carrier": "UA", "month": 11, "distance": 500}]}
    two_rows = {"dataframe_records": records["dataframe_records"] * 2}
    assert len({digest_of(records), digest_of(other_row), digest_of(two_rows),
                digest_of({**records, "model_version": 1})}) == 4


def test_the_digest_does_not_depend_on_the_model_s_column_order() -> None:
    # a deploy whose model lists the same columns in another order: an honest retry is the same request
    records = {"dataframe_records": [{"carrier": "UA", "month": 10, "distance": 500}]}
    before = parse_request(json.dumps(records).encode(), COLUMNS, max_body_bytes=10_000, max_rows=10)
    after = parse_request(json.dumps(records).encode(), dict(reversed(COLUMNS.items())), max_body_bytes=10_000,
                          max_rows=10)
    assert before.to_body() != after.to_body()  # what the replicas get differs ...
    assert request_digest(before) == request_digest(after)  # ... the request does not


def test_one_request_holds_a_key_and_the_others_wait_or_are_refused() -> None:
    async def scenario() -> None:
        claims = KeyClaims("ep")
        assert await claims.wait_turn("job-7:1", "a") is None  # the first request holds the key
        same = asyncio.ensure_future(claims.wait_turn("job-7:1", "a"))
        await asyncio.sleep(0.01)
        assert not same.done()  # waits for the holder's answer
        with pytest.raises(IdempotencyKeyReusedError, match="Idempotency-Key 'job-7:1' on endpoint 'ep'"):
            await claims.wait_turn("job-7:1", "b")  # another request: refused at once, not after the wait
        assert await claims.wait_turn("job-8:1", "b") is None  # other keys are free
        claims.release("job-7:1", (200, b"answer"))
        assert await same == (200, b"answer")
        assert "job-7:1" not in claims and "job-8:1" in claims

    asyncio.run(scenario())


def test_when_the_holder_keeps_no_answer_one_waiter_takes_the_key() -> None:
    async def scenario() -> None:
        claims = KeyClaims("ep")
        assert await claims.wait_turn("k", "a") is None
        waiters = [asyncio.ensure_future(claims.wait_turn("k", "a")) for _ in range(3)]
        await asyncio.sleep(0.01)
        claims.release("k", None)  # the holder failed (e.g. 503): nothing to replay
        await asyncio.sleep(0.01)
        assert [w.done() for w in waiters] == [True, False, False]  # one scores; two wait for it
        assert waiters[0].result() is None and "k" in claims
        claims.release("k", (200, b"second try"))
        assert [await w for w in waiters[1:]] == [(200, b"second try")] * 2

    asyncio.run(scenario())
