"""The cold path: load the version and score in a process of its own, as a batch job would.

When no replica can answer (no replica is ready and the request cannot wait for one to start, the queue
is full, or a request asks for a version no replica holds; requests that arrive while a replica loads
wait in the queue for it), the endpoint forks
a child from its preloaded fork server (:mod:`lakescore.serving.forkserver`), which has imported the
scoring stack but holds no model, so the child imports nothing more when the endpoint knows the
version's local artifact location (a version it started replicas of or answered cold before): it loads
``models:/<name>/<version>`` from there with ``mlflow.pyfunc.load_model`` (the certificate is
re-verified); for another version it reads the registry first, importing MLflow's SQL store (about
0.7 s), which the fork server leaves out to keep the replicas small. Then it calls the pyfunc's
``predict`` — the same ``FittedChain.predict`` a batch job calls — on the request's rows, sends the
reply (``served: cold``) back and exits. Slower, never different.

A process without a fork server (the client's fallback, :func:`score_cold_sync`) runs
``python -m lakescore.serving.replicas.cold`` instead: the same :func:`cold_reply`, after a fresh
interpreter's imports; the rows go in on stdin as ``dataframe_split`` JSON, the reply comes out on
stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from lakescore.errors import LakescoreError, ServingError

BODY_LIMIT = 1 << 30


@dataclass(frozen=True)
class ColdReply:
    """What a cold-path process sends back: the reply JSON and who computed it.

    Attributes
    ----------
    payload : bytes
        ``{"predictions": [...]}`` or ``{"error_code": ..., "message": ...}`` as JSON.
    pid, parent_pid : int
        The process that scored, and its parent (the fork server, on the endpoint's cold path).
    """

    payload: bytes
    pid: int
    parent_pid: int


@dataclass(frozen=True)
class ColdFeatures:
    """How the cold path reads a lookup model's feature tables: ``reader`` (it must pickle), the
    version's lookup specs, and the Delta versions the warm replicas hold (None: the current ones)."""

    reader: Any
    specs: tuple[dict[str, Any], ...]
    versions: dict[str, int] | None = None


def cold_reply(model_uri: str, version: int, tracking_uri: str, body: bytes,
               features: ColdFeatures | None = None, load_uri: str | None = None) -> ColdReply:
    """Load ``model_uri`` as a batch job does (from ``load_uri``, its local artifact location, when
    the endpoint knows it: no registry read then) and score a ``dataframe_split`` body; never raises
    (an error becomes the payload's ``error_code`` and ``message``). A lookup model's rows are joined
    with the feature tables ``features`` reads first, as a warm replica joins them."""
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
    os.environ["MLFLOW_REGISTRY_URI"] = tracking_uri
    from lakescore.serving.http.wire import dumps, parse_request, scored_rows

    try:
        import mlflow.pyfunc  # what a batch job loads

        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
        model = mlflow.pyfunc.load_model(load_uri or model_uri)
        from lakescore.serving.features import read_features
        from lakescore.serving.replicas.replica import serving_columns

        held = None if features is None else read_features(features.reader, features.specs, features.versions)
        columns, lookups = serving_columns(model, held, model_uri)
        parsed = parse_request(body, columns, max_body_bytes=BODY_LIMIT, max_rows=10**7)
        frame = held.join(parsed.frame, lookups) if lookups and held is not None else parsed.frame
        rows = scored_rows(model.predict(frame), model_version=version, served="cold",
                           feature_tables=held.record() if lookups and held is not None else None)
        payload = dumps({"predictions": rows})
    except LakescoreError as err:
        payload = dumps({"error_code": err.code, "message": str(err)})
    except Exception as err:  # reported to the endpoint, which answers with it
        payload = dumps({"error_code": "cold_path_failed", "message": f"{type(err).__name__}: {err}"})
    return ColdReply(bytes(payload), os.getpid(), os.getppid())


def _rows(payload: bytes, detail: str, model_uri: str) -> list[dict[str, Any]]:
    try:
        answer = json.loads(payload) if payload else {}
    except json.JSONDecodeError:
        answer = {}
    if "predictions" in answer:
        return list(answer["predictions"])
    message = answer.get("message") or detail or "no answer"
    raise ServingError(f"the cold path could not score with {model_uri}: {message}. Check that the version "
                       "exists and loads (`lakescore score` uses the same call).",
                       cold_error_code=answer.get("error_code", "cold_path_failed"))


def _timed_out(model_uri: str, timeout_s: float) -> ServingError:
    return ServingError(f"the cold path for {model_uri} ran over {timeout_s:g} s (cold_timeout_s in "
                        "config/serving.yml); raise it or keep a replica warm")


async def run_cold(*, model_uri: str, version: int, tracking_uri: str, body: bytes, timeout_s: float,
                   features: ColdFeatures | None = None, load_uri: str | None = None) -> ColdReply:
    """:func:`cold_reply` in a child forked from this process's preloaded fork server (asyncio).

    Raises
    ------
    ServingError
        The child ran over ``timeout_s`` (it is killed) or died without answering.
    """
    from lakescore.serving import forkserver

    child = await asyncio.to_thread(forkserver.start, cold_reply, model_uri, version, tracking_uri, body, features,
                                    load_uri, what=f"the cold path for {model_uri}")
    try:
        return await asyncio.wait_for(asyncio.to_thread(child.result, None), timeout=timeout_s)
    except (TimeoutError, asyncio.CancelledError) as error:
        await asyncio.to_thread(child.kill)  # the waiting thread then sees EOF and ends
        if isinstance(error, asyncio.CancelledError):
            raise
        raise _timed_out(model_uri, timeout_s) from error


async def score_cold(*, model_uri: str, version: int, tracking_uri: str, body: bytes,
                     timeout_s: float, features: ColdFeatures | None = None,
                     load_uri: str | None = None) -> list[dict[str, Any]]:
    """Score a ``dataframe_split`` body on the cold path: in a child of the preloaded fork server.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>``.
    version : int
        The version number written into each reply row.
    tracking_uri : str
        MLflow tracking and registry URI.
    body : bytes
        ``dataframe_split`` JSON, already validated by the endpoint.
    timeout_s : float
        Seconds before the child is killed.
    features : ColdFeatures, optional
        A lookup model's feature tables (read in the child, at the versions the warm replicas hold).
    load_uri : str, optional
        The version's local artifact location (``ReplicaBackend.location``): the child loads from
        there without reading the registry (default: ``model_uri`` itself).

    Returns
    -------
    list of dict
        One reply row per request row, with ``served: "cold"`` and ``model_version``.

    Raises
    ------
    ServingError
        The child failed, sent no answer, or ran over ``timeout_s``.
    """
    reply = await run_cold(model_uri=model_uri, version=version, tracking_uri=tracking_uri, body=body,
                           timeout_s=timeout_s, features=features, load_uri=load_uri)
    return _rows(reply.payload, "", model_uri)


def _command(model_uri: str, version: int, tracking_uri: str) -> list[str]:
    return [sys.executable, "-m", "lakescore.serving.replicas.cold", "--model-uri", model_uri,
            "--version", str(version), "--tracking-uri", tracking_uri]


def score_cold_sync(*, model_uri: str, version: int, tracking_uri: str, body: bytes,
                    timeout_s: float) -> list[dict[str, Any]]:
    """The cold path for callers without a fork server or event loop (the client's fallback): a
    fresh ``python -m lakescore.serving.replicas.cold`` process, which pays the imports (~2 s more)."""
    try:
        done = subprocess.run(_command(model_uri, version, tracking_uri), input=body, capture_output=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as error:
        raise _timed_out(model_uri, timeout_s) from error
    tail = " | ".join(done.stderr.decode(errors="replace").strip().splitlines()[-3:])
    return _rows(done.stdout, tail or f"exit code {done.returncode}", model_uri)


def main(argv: list[str] | None = None) -> int:
    """Load the version, score stdin's rows, print the reply; exit 0, or 1 with a JSON error."""
    parser = argparse.ArgumentParser(prog="lakescore-cold")
    parser.add_argument("--model-uri", required=True)
    parser.add_argument("--version", type=int, required=True)
    parser.add_argument("--tracking-uri", required=True)
    args = parser.parse_args(argv)
    reply = cold_reply(args.model_uri, args.version, args.tracking_uri, sys.stdin.buffer.read())
    sys.stdout.buffer.write(reply.payload)
    return 0 if "predictions" in json.loads(reply.payload) else 1


if __name__ == "__main__":
    sys.exit(main())
