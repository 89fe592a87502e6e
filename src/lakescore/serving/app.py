"""The FastAPI app of one copy: one process holding one registered version, scoring one request at
a time.

The copy loads ``models:/<name>/<version>`` with ``mlflow.pyfunc.load_model`` (so the certificate
is re-verified in ``load_context``) in a background thread while the server already listens:
``GET /health`` says ``loading`` (503) until the model is ready. ``POST /invocations`` checks the
body against the model signature (4xx naming the column or limit) and answers with the pyfunc's
``predict``, i.e. ``FittedChain.predict`` — exactly the call batch scoring makes. No request can
stop the process: every error becomes a JSON reply with a stable code.

The local process backend either forks the copy from a preloaded fork server
(:func:`run_forked_copy`) or runs ``python -m lakescore.serving.app --model-uri ... --fd N``; the
token arrives through the fork or in the environment (``LAKESCORE_SERVING_TOKEN``), never on the
command line.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hmac
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from lakescore.errors import LakescoreError, RequestError
from lakescore.serving.wire import dumps, parse_request, scored_rows

TOKEN_ENV = "LAKESCORE_SERVING_TOKEN"


def reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON response (NaN-free) with ``status``."""
    return Response(dumps(payload), status_code=status, media_type="application/json", headers=headers)


def error_reply(err: Exception, headers: dict[str, str] | None = None) -> Response:
    """The JSON error reply for ``err``: ``{"error_code", "message"}`` with the error's HTTP status."""
    if isinstance(err, LakescoreError):
        return reply(err.http_status, {"error_code": err.code, "message": str(err), **_fields(err)}, headers)
    return reply(500, {"error_code": "scoring_failed",
                       "message": f"{type(err).__name__}: {err}. The copy keeps serving; check the input "
                                  "rows or the model, and see the copy's log."}, headers)


def _fields(err: LakescoreError) -> dict[str, Any]:
    return {k: v for k, v in err.fields.items() if isinstance(v, (str, int, float, list))}


def authorized(request: Request, token: str) -> bool:
    """True when the request carries ``Authorization: Bearer <token>`` (compared in constant time)."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


UNAUTHORIZED = {"error_code": "unauthorized",
                "message": "missing or wrong bearer token; send 'Authorization: Bearer <token>' with the "
                           "token from .lakescore/serving/token"}


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


class LoadedVersion:
    """The model of one copy, loaded in the background; ``state`` is loading, ready or failed."""

    def __init__(self, model_uri: str, version: int) -> None:
        self.model_uri = model_uri
        self.version = version
        self.state = "loading"
        self.error = ""
        self.model: Any = None
        self.columns: dict[str, str] = {}
        self.task = ""
        self.loaded_s = 0.0
        self._score_lock = threading.Lock()

    def load(self) -> None:
        """``mlflow.pyfunc.load_model`` (certificate verified in ``load_context``); sets ``state``."""
        started = time.monotonic()
        try:
            import mlflow.pyfunc  # heavy: the copy's whole reason to exist

            model = mlflow.pyfunc.load_model(self.model_uri)
            from lakescore.packaging import loaded_input_kinds

            self.columns = loaded_input_kinds(model)
            self.task = model.unwrap_python_model().chain.task
            self.model = model
            trim_memory()
            self.state = "ready"
        except Exception as err:  # reported by /health; the backend sees a failed copy
            self.error = f"{type(err).__name__}: {err}"
            self.state = "failed"
            print(f"lakescore copy: {self.model_uri} did not load: {self.error}", file=sys.stderr, flush=True)
        self.loaded_s = time.monotonic() - started

    def score(self, frame: Any) -> Any:
        """``pyfunc.predict`` (= ``FittedChain.predict``), one request at a time."""
        with self._score_lock:
            return self.model.predict(frame)


def trim_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``)."""
    gc.collect()
    try:  # glibc keeps freed arenas; give them back so the copy's resident size is honest
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def create_copy_app(loaded: LoadedVersion, *, token: str, max_body_bytes: int, max_rows: int) -> FastAPI:
    """The app of one copy.

    Parameters
    ----------
    loaded : LoadedVersion
        The version this copy holds (loading in the background or ready).
    token : str
        Bearer token every request must carry.
    max_body_bytes, max_rows : int
        Request limits (bytes, rows), as in config/serving.yml.
    """
    import psutil  # resident memory for /health

    app = FastAPI(title="lakescore copy", docs_url=None, redoc_url=None, openapi_url=None)
    process = psutil.Process()

    @app.get("/health")
    async def health(request: Request) -> Response:
        if not authorized(request, token):
            return reply(401, UNAUTHORIZED)
        body = {"state": loaded.state, "version": loaded.version, "model_uri": loaded.model_uri,
                "task": loaded.task, "input_columns": loaded.columns, "pid": os.getpid(),
                "rss_bytes": process.memory_info().rss, "load_s": round(loaded.loaded_s, 3),
                "error": loaded.error}
        return reply({"ready": 200, "loading": 503}.get(loaded.state, 500), body)

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        if not authorized(request, token):
            return reply(401, UNAUTHORIZED)
        if loaded.state != "ready":
            return reply(503, {"error_code": "copy_not_ready", "message": f"copy is {loaded.state}"},
                         {"Retry-After": "5"})
        try:
            body = await read_body(request, max_body_bytes)
            parsed = parse_request(body, loaded.columns, max_body_bytes=max_body_bytes, max_rows=max_rows)
            started = time.perf_counter()
            scored = await run_in_threadpool(loaded.score, parsed.frame)
            rows = scored_rows(scored, model_version=loaded.version, served="warm")
            return reply(200, {"predictions": rows, "model_version": loaded.version, "served": "warm",
                               "score_ms": round((time.perf_counter() - started) * 1000, 3)})
        except Exception as err:  # a request never takes the copy down
            return error_reply(err)

    return app


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)  # the endpoint (or the fork server) is gone: no orphan copies
        time.sleep(1.0)


@dataclass(frozen=True)
class CopyOptions:
    """What a copy needs besides its socket and token."""

    model_uri: str
    version: int
    tracking_uri: str
    max_body_bytes: int
    max_rows: int


def serve_copy(sock: socket.socket, options: CopyOptions, token: str, *, parent_pid: int) -> None:
    """Load the version in the background and answer on ``sock`` until SIGTERM (or the parent dies)."""
    os.environ["MLFLOW_TRACKING_URI"] = options.tracking_uri
    os.environ["MLFLOW_REGISTRY_URI"] = options.tracking_uri
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    loaded = LoadedVersion(options.model_uri, options.version)
    threading.Thread(target=loaded.load, daemon=True, name="load-model").start()
    import uvicorn  # the copy's server

    app = create_copy_app(loaded, token=token, max_body_bytes=options.max_body_bytes, max_rows=options.max_rows)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=5))
    server.run(sockets=[sock])


def run_forked_copy(sock: socket.socket, options: CopyOptions, token: str, log_path: str) -> None:
    """Entry point of a copy forked from the preloaded fork server (see ``backend``)."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    serve_copy(sock, options, token, parent_pid=os.getppid())


def main(argv: list[str] | None = None) -> int:
    """Run one copy in a new process on an inherited, already listening socket (``--fd``)."""
    parser = argparse.ArgumentParser(prog="lakescore-copy")
    parser.add_argument("--model-uri", required=True)
    parser.add_argument("--version", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--max-body-bytes", type=int, required=True)
    parser.add_argument("--max-rows", type=int, required=True)
    args = parser.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        print(f"lakescore copy: {TOKEN_ENV} is not set; copies are started by `lakescore serve`", file=sys.stderr)
        return 2
    options = CopyOptions(args.model_uri, args.version, args.tracking_uri, args.max_body_bytes, args.max_rows)
    serve_copy(socket.socket(fileno=args.fd), options, token, parent_pid=args.parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
