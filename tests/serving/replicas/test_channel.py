"""The endpoint -> replica channel with a real replica process: frames over its Unix socket."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import orjson
import pytest
from serving_helpers import MODEL, Trained, assert_same_answers, chain_of, expected_rows, records

from lakescore.runtime import LocalRuntime
from lakescore.serving.http.wire import parse_request
from lakescore.serving.replicas.backend import LocalProcessBackend
from lakescore.serving.replicas.channel import (
    HEADER,
    HEALTH,
    SCORE,
    ReplicaChannel,
    ReplicaChannels,
    frame,
    health,
    socket_path,
)


@pytest.fixture(scope="module")
def replica_address(module_home, tmp_path_factory):
    home, _ = module_home
    backend = LocalProcessBackend(model_name=MODEL, tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                  log_dir=tmp_path_factory.mktemp("replica-logs"))
    address = backend.start("c-v1", 1)
    deadline = time.monotonic() + 120
    while (status := backend.status("c-v1")).state == "starting" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status.state == "ready", status
    try:
        yield address
    finally:
        backend.stop_all()
        assert not Path(socket_path(address)).parent.exists()


def score(address: str, body: bytes) -> tuple[int, dict]:
    async def ask() -> tuple[int, bytes]:
        channels = ReplicaChannels(timeout_s=60)
        try:
            return await channels.score(address, body)
        finally:
            channels.close()

    status, payload = asyncio.run(ask())
    return status, orjson.loads(payload)


def test_only_this_user_can_reach_the_replica_socket(replica_address) -> None:
    folder = Path(socket_path(replica_address)).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert folder.stat().st_uid == os.getuid()
    code, body = health(replica_address)
    assert (code, body["state"], body["version"]) == (200, "ready", 1)


def test_checked_rows_get_the_chain_s_answers(replica_address, trained: Trained, module_home) -> None:
    home, _ = module_home
    chain = chain_of(LocalRuntime(home), 1)
    columns = {name: kind for name, kind in health(replica_address)[1]["input_columns"].items()}
    rows = records(trained.requests, trained.input_columns)
    body = parse_request(orjson.dumps({"dataframe_records": rows}), columns, max_body_bytes=10**6,
                         max_rows=100).to_body()
    status, payload = score(replica_address, body)
    assert status == 200 and payload["served"] == "warm" and payload["model_version"] == 1
    assert_same_answers(payload["predictions"], expected_rows(chain, trained.requests))


def test_nan_is_answered_as_null_and_infinity_is_refused_before_the_replica(replica_address, trained: Trained) -> None:
    columns = health(replica_address)[1]["input_columns"]
    number = next(name for name, kind in columns.items() if kind == "double")
    row = records(trained.requests.head(1), trained.input_columns)[0]
    as_null = orjson.dumps({"dataframe_records": [{**row, number: None}]})
    as_nan = as_null.replace(f'"{number}":null'.encode(), f'"{number}":NaN'.encode())
    assert b"NaN" in as_nan
    answers = [score(replica_address, parse_request(b, columns, max_body_bytes=10**6, max_rows=1).to_body())
               for b in (as_null, as_nan)]
    assert answers[0][0] == answers[1][0] == 200
    assert answers[0][1]["predictions"] == answers[1][1]["predictions"]
    with pytest.raises(Exception, match=f"column '{number}' needs a finite number or null"):
        parse_request(as_nan.replace(b"NaN", b"Infinity"), columns, max_body_bytes=10**6, max_rows=1)


def test_bad_frames_and_dropped_connections_do_not_stop_the_replica(replica_address) -> None:
    status, payload = score(replica_address, b"not json")
    assert status == 500 and payload["error_code"] == "scoring_failed"
    with socket.socket(socket.AF_UNIX) as sock:  # an unknown frame code
        sock.connect(socket_path(replica_address))
        sock.sendall(frame(99))
        head = sock.recv(HEADER.size)
        assert HEADER.unpack(head)[0] == 400
    with socket.socket(socket.AF_UNIX) as sock:  # a frame cut off halfway
        sock.connect(socket_path(replica_address))
        sock.sendall(HEADER.pack(HEALTH, 100) + b"{")
    assert health(replica_address)[0] == 200


def test_a_cancelled_ask_does_not_hand_its_answer_to_the_next_one() -> None:
    async def answer_each_frame(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                code, length = HEADER.unpack(await reader.readexactly(HEADER.size))
                payload = await reader.readexactly(length)
                await asyncio.sleep(0.3 if payload == b"slow" else 0)
                writer.write(frame(200, payload))  # echoes what it was asked
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def scenario(path: str) -> tuple[int, bytes]:
        server = await asyncio.start_unix_server(answer_each_frame, path)
        channel = ReplicaChannel(f"unix:{path}")
        try:
            slow = asyncio.create_task(channel.ask(SCORE, b"slow", timeout_s=5))
            await asyncio.sleep(0.05)
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            return await channel.ask(SCORE, b"next", timeout_s=5)
        finally:
            channel.close()
            server.close()

    folder = tempfile.mkdtemp(prefix="lakescore-channel-")  # short: a socket path has at most 107 bytes
    try:
        assert asyncio.run(scenario(os.path.join(folder, "c.sock"))) == (200, b"next")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
