"""One replica: a process holding one registered version, scoring one request at a time.

The replica loads ``models:/<name>/<version>`` with ``mlflow.pyfunc.load_model`` (so the certificate
is re-verified in ``load_context``) from the version's artifact location, which the endpoint read
from the registry once (:func:`lakescore.serving.plan.artifact_location`), so a replica holds no
registry client, in a background thread while it already listens on its Unix
socket (see :mod:`lakescore.serving.replicas.channel`): ``HEALTH`` answers 503 ``loading`` until the model
is ready. ``SCORE`` carries rows the endpoint already checked against the same signature, so the
replica reads them without checking again (:func:`lakescore.serving.http.wire.forwarded`), builds the
frame and answers with the loaded model's ``predict``, i.e. ``FittedChain.predict`` after the
same input conformance every route applies — exactly the call batch scoring makes (MLflow's own
schema enforcement is skipped: the endpoint did it, stricter). No request can stop the process:
every error becomes a JSON reply with a stable code.

The local process backend either forks the replica from a preloaded fork server
(:func:`run_forked_replica`) or runs ``python -m lakescore.serving.replicas.replica --model-uri ... --fd N``
on an inherited, already listening socket.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from lakescore.errors import ServingError
from lakescore.serving.features import Features, request_columns
from lakescore.serving.http.wire import ScoreRequest, dumps, error_payload, forwarded, scored_rows
from lakescore.serving.replicas.channel import HEALTH, SCORE, ChannelError, frame, read_frame


class LoadedVersion:
    """The model of one replica, loaded in the background; ``state`` is loading, ready or failed."""

    def __init__(self, model_uri: str, version: int, features: Features | None = None, *,
                 load_uri: str | None = None) -> None:
        self.model_uri = model_uri
        self.load_uri = load_uri or model_uri  # where the files are read from (the version's artifact location)
        self.version = version
        self.features = features  # a lookup model's feature rows (read by the holder this replica is forked from)
        self.lookups: tuple[Any, ...] = ()
        self.state = "loading"
        self.error = ""
        self.model: Any = None
        self.columns: dict[str, str] = {}
        self.task = ""
        self.loaded_s = 0.0
        self.scoring_since: float | None = None  # time.monotonic() when the running score began
        self._score_lock = threading.Lock()

    def load(self) -> None:
        """``mlflow.pyfunc.load_model`` (certificate verified in ``load_context``); sets ``state``."""
        started = time.monotonic()
        try:
            import mlflow.pyfunc  # heavy: the replica's whole reason to exist

            model = mlflow.pyfunc.load_model(self.load_uri)
            self.model = model.unwrap_python_model()
            self.columns, self.lookups = serving_columns(model, self.features, self.model_uri)
            if self.lookups and self.features is not None:  # the key casts for the request's dtypes, once
                self.features.prepare(ScoreRequest({c: [] for c in self.columns}, dict(self.columns)).frame,
                                      self.lookups)
            self.task = self.model.chain.task
            trim_memory()
            self.state = "ready"
        except Exception as err:  # reported by HEALTH; the backend sees a failed replica
            self.error = f"{type(err).__name__}: {err}"
            self.state = "failed"
            print(f"lakescore replica: {self.model_uri} did not load: {self.error}", file=sys.stderr, flush=True)
        self.loaded_s = time.monotonic() - started

    def score(self, frame: Any) -> Any:
        """The pyfunc's ``predict`` (conformance, then ``FittedChain.predict``), one request at a time;
        a lookup model's feature rows are joined on first (:meth:`Features.join`)."""
        with self._score_lock:
            self.scoring_since = time.monotonic()
            try:
                if self.lookups and self.features is not None:
                    frame = self.features.join(frame, self.lookups)
                return self.model.predict(None, frame)
            finally:
                self.scoring_since = None

    @property
    def feature_tables(self) -> list[dict[str, Any]] | None:
        """The feature table versions this replica answers with (None: the model has no lookups)."""
        return self.features.record() if self.lookups and self.features is not None else None


def serving_columns(model: Any, features: Features | None, model_uri: str) -> tuple[dict[str, str], tuple[Any, ...]]:
    """What a request to a loaded pyfunc carries (:func:`lakescore.serving.features.request_columns`)
    and the chain's lookups.

    Raises
    ------
    ServingError
        The model joins feature lookups and ``features`` is None (nothing read its feature tables).
    """
    from lakescore.packaging import loaded_input_kinds

    lookups = tuple(model.unwrap_python_model().chain.lookups)
    if lookups and features is None:
        raise ServingError(f"{model_uri} joins feature lookups ({', '.join(s.table_name for s in lookups)}) but "
                           "no feature tables were read for it; serve it through lakescore serve, which reads them")
    return request_columns(loaded_input_kinds(model), [s.to_json() for s in lookups]), lookups


def trim_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``)."""
    gc.collect()
    try:  # glibc keeps freed arenas; give them back so the replica's resident size is honest
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def answer(loaded: LoadedVersion, code: int, payload: bytes) -> tuple[int, bytes]:
    """The replica's answer to one frame: (HTTP status, JSON bytes). Never raises.

    ``HEALTH``: 200 ready, 503 loading, 500 failed, with the state, version, pid, resident memory,
    load time and ``scoring_s`` (seconds the running score has taken; null when idle). ``SCORE``: 200 ``{"predictions": rows, "model_version", "served": "warm",
    "score_ms"}``; 503 ``replica_not_ready`` while loading; a 4xx/500 error payload otherwise.
    """
    try:
        if code == HEALTH:
            return _health(loaded)
        if code != SCORE:
            return 400, dumps({"error_code": "bad_frame", "message": f"unknown frame code {code}"})
        if loaded.state != "ready":
            return 503, dumps({"error_code": "replica_not_ready", "message": f"replica is {loaded.state}"})
        started = time.perf_counter()
        scored = loaded.score(forwarded(payload, loaded.columns).frame)
        rows = scored_rows(scored, model_version=loaded.version, served="warm", feature_tables=loaded.feature_tables)
        return 200, dumps({"predictions": rows, "model_version": loaded.version, "served": "warm",
                           "score_ms": round((time.perf_counter() - started) * 1000, 3)})
    except Exception as err:  # a request never takes the replica down
        status, body = error_payload(err)
        return status, dumps(body)


def _health(loaded: LoadedVersion) -> tuple[int, bytes]:
    import psutil  # resident memory

    body = {"state": loaded.state, "version": loaded.version, "model_uri": loaded.model_uri, "task": loaded.task,
            "input_columns": loaded.columns, "pid": os.getpid(), "rss_bytes": psutil.Process().memory_info().rss,
            "load_s": round(loaded.loaded_s, 3), "error": loaded.error, "scoring_s": _scoring_s(loaded)}
    return {"ready": 200, "loading": 503}.get(loaded.state, 500), dumps(body)


def _scoring_s(loaded: LoadedVersion) -> float | None:
    since = loaded.scoring_since
    return None if since is None else round(time.monotonic() - since, 3)


def _converse(conn: socket.socket, loaded: LoadedVersion) -> None:
    """Answer the frames of one connection until the endpoint closes it."""
    with conn:
        try:
            while (got := read_frame(conn)) is not None:
                conn.sendall(frame(*answer(loaded, *got)))
        except (ChannelError, OSError):  # the endpoint went away mid-frame: only this connection ends
            pass


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)  # the endpoint (or the fork server) is gone: no orphan replicas
        time.sleep(1.0)


@dataclass(frozen=True)
class ReplicaOptions:
    """What a replica needs besides its socket: the version it serves (``model_uri``, named in its
    answers and messages) and where its files are read from (``load_uri``: the version's artifact
    location, default ``model_uri`` itself)."""

    model_uri: str
    version: int
    tracking_uri: str
    load_uri: str | None = None


def serve_replica(sock: socket.socket, options: ReplicaOptions, *, parent_pid: int,
                  features: Features | None = None) -> None:
    """Load the version in the background and answer on ``sock`` (listening) until SIGTERM or the
    parent dies. Each connection has its own thread; scoring takes one request at a time.
    ``features``: the feature rows a lookup model joins (read by the holder the replica is forked from)."""
    os.environ["MLFLOW_TRACKING_URI"] = options.tracking_uri
    os.environ["MLFLOW_REGISTRY_URI"] = options.tracking_uri
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    loaded = LoadedVersion(options.model_uri, options.version, features, load_uri=options.load_uri)
    threading.Thread(target=loaded.load, daemon=True, name="load-model").start()
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=_converse, args=(conn, loaded), daemon=True, name="connection").start()


def run_forked_replica(sock: socket.socket, options: ReplicaOptions, log_path: str, *,
                       parent_pid: int | None = None, features: Features | None = None) -> None:
    """Entry point of a replica forked from the preloaded fork server (see ``backend``), or from a
    lookup model's feature holder (:mod:`lakescore.serving.replicas.feature_holder`), with its ``features``.

    ``parent_pid`` is the process that forked it, taken before the fork: a parent that exits
    before the child first runs would otherwise leave it watching the process it was handed to
    instead, and running for ever. None: this process's parent when it starts (the fork server,
    which outlives its replicas)."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    serve_replica(sock, options, parent_pid=os.getppid() if parent_pid is None else parent_pid, features=features)


def main(argv: list[str] | None = None) -> int:
    """Run one replica in a new process on an inherited, already listening socket (``--fd``)."""
    parser = argparse.ArgumentParser(prog="lakescore-replica")
    parser.add_argument("--model-uri", required=True)
    parser.add_argument("--load-uri", default=None, help="where the files are (default: --model-uri)")
    parser.add_argument("--version", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    options = ReplicaOptions(args.model_uri, args.version, args.tracking_uri, args.load_uri)
    serve_replica(socket.socket(fileno=args.fd), options, parent_pid=args.parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
