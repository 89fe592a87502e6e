"""An endpoint over a scripted backend, for the serving tests that drive replicas by hand: the
ReplicaBackend seam with scripted replica states (no processes, no model), replicas that answer on real
Unix sockets, and a one-row request."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable

import orjson
from serving_helpers import MODEL

from lakescore.config import ServingConfig
from lakescore.serving.endpoint import Endpoint
from lakescore.serving.http.wire import ScoreRequest, parse_request
from lakescore.serving.plan import EndpointPlan
from lakescore.serving.replicas.backend import ReplicaStatus
from lakescore.serving.replicas.channel import HEADER, frame, socket_path
from lakescore.serving.replicas.pool import Replica
from lakescore.serving.state.store import ServingState


class FakeBackend:
    """The ReplicaBackend seam with scripted replica states (no processes). A replica's address is a Unix
    socket path where a test may serve a :func:`fake_replica`; ``on_start``/``on_status`` run inside
    those calls (the endpoint awaits them in a thread), to change the endpoint meanwhile."""

    def __init__(self) -> None:
        self.states: dict[str, ReplicaStatus] = {}
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.fresh: list[str] = []
        self.folder = tempfile.mkdtemp(prefix="ls-fake-")  # short: a socket path has at most 107 bytes
        self.on_start: Callable[[str, int], None] | None = None
        self.on_status: Callable[[str], None] | None = None
        self.fail_start: set[int] = set()  # 1-based start calls that raise OSError

    def start(self, replica_id: str, version: int, *, features: object = None) -> str:
        if len(self.started) + 1 in self.fail_start:
            self.started.append("")
            raise OSError(f"no room to start {replica_id}")
        self.started.append(replica_id)
        self.states[replica_id] = ReplicaStatus("starting", "loading")
        if self.on_start is not None:
            self.on_start(replica_id, version)
        return f"unix:{self.folder}/{len(self.started)}.sock"

    def status(self, replica_id: str, *, fresh: bool = False) -> ReplicaStatus:
        if fresh:
            self.fresh.append(replica_id)
        if self.on_status is not None:
            self.on_status(replica_id)
        return self.states.get(replica_id, ReplicaStatus("stopped"))

    def stop(self, replica_id: str) -> None:
        self.stopped.append(replica_id)
        self.states.pop(replica_id, None)

    def stop_all(self) -> None:
        for replica_id in list(self.states):
            self.stop(replica_id)

    def location(self, version: int) -> str | None:
        return None  # the cold path loads models:/ itself

    def pid(self, replica_id: str) -> int | None:
        return None

    def holder_pids(self) -> list[int]:
        return []


async def fake_replica(address: str, *, delay_s: float = 0.0, status: int = 200) -> asyncio.AbstractServer:
    """A replica on a real Unix socket that answers each SCORE frame with 200 and one row: the
    ``dataframe_split`` it was sent (columns and data), after ``delay_s`` seconds; with another
    ``status``, that status and a message (a model error)."""

    async def converse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                code, length = HEADER.unpack(await reader.readexactly(HEADER.size))
                split = orjson.loads(await reader.readexactly(length))["dataframe_split"]
                await asyncio.sleep(delay_s)
                answer = {"predictions": [split]} if status == 200 else {"message": "the model raised ValueError"}
                writer.write(frame(status, orjson.dumps(answer)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_unix_server(converse, socket_path(address))


async def ready_replica(ep: Endpoint, backend: FakeBackend, role: str, version: int, *, listen: bool = True,
                     **serve: float) -> Replica:
    """Start a replica through the endpoint, serve it with :func:`fake_replica` (unless ``listen`` is
    false), and mark it ready."""
    replica = await ep._start_replica(role, version)  # type: ignore[arg-type]
    if listen:  # not listening: a replica that died after its last health check
        await fake_replica(replica.address, **serve)  # type: ignore[arg-type]
    backend.states[replica.replica_id] = ReplicaStatus("ready")
    await ep.health.check()
    assert replica.state == "ready"
    return replica


def one_row(columns: dict[str, str], row: dict, **extra: object) -> ScoreRequest:  # type: ignore[type-arg]
    return parse_request(orjson.dumps({"dataframe_records": [row], **extra}), columns, max_body_bytes=1 << 20,
                         max_rows=10)


def fake_endpoint(tmp_path, **settings) -> tuple[Endpoint, FakeBackend, ServingState]:  # type: ignore[no-untyped-def]
    config = ServingConfig.model_validate({"inference_table": "main.s.inference", **settings})
    plan = EndpointPlan(name="ep", model_name=MODEL, version=1, selection="champion", input_columns={"a": "long"},
                        task="classification", settings=config, home=tmp_path, tracking_uri="sqlite://",
                        training_table="main.s.train", training_filter=None)
    backend, state = FakeBackend(), ServingState(tmp_path)
    return Endpoint(plan, backend=backend, state=state, write=lambda frame: None), backend, state

