"""The cold path: a fresh process that loads the version and scores, as a batch job would.

When no copy can answer (down, loading, or a request asks for another version), the endpoint runs
``python -m lakescore.serving.cold``: it loads ``models:/<name>/<version>`` with
``mlflow.pyfunc.load_model`` (the certificate is re-verified) and calls the pyfunc's ``predict`` —
the same ``FittedChain.predict`` — on the request's rows. The rows arrive on stdin as
``dataframe_split`` JSON; the reply (``served: cold``) leaves on stdout. Slower, never different.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from lakescore.errors import LakescoreError, ServingError

BODY_LIMIT = 1 << 30


def _command(model_uri: str, version: int, tracking_uri: str) -> list[str]:
    return [sys.executable, "-m", "lakescore.serving.cold", "--model-uri", model_uri, "--version", str(version),
            "--tracking-uri", tracking_uri]


def _result(code: int | None, out: bytes, err: bytes, model_uri: str) -> list[dict[str, Any]]:
    try:
        payload = json.loads(out) if out else {}
    except json.JSONDecodeError:
        payload = {}
    if code == 0 and "predictions" in payload:
        return payload["predictions"]
    tail = err.decode(errors="replace").strip().splitlines()[-3:]
    message = payload.get("message") or " | ".join(tail) or f"exit code {code}"
    raise ServingError(f"the cold path could not score with {model_uri}: {message}. Check that the version "
                       "exists and loads (`lakescore score` uses the same call).",
                       cold_error_code=payload.get("error_code", "cold_path_failed"))


async def score_cold(*, model_uri: str, version: int, tracking_uri: str, body: bytes,
                     timeout_s: float) -> list[dict[str, Any]]:
    """Score a ``dataframe_split`` body in a fresh process (asyncio).

    Parameters
    ----------
    body : bytes
        ``dataframe_split`` JSON, already validated by the endpoint.
    timeout_s : float
        Seconds before the process is killed.

    Returns
    -------
    list of dict
        One reply row per request row, with ``served: "cold"`` and ``model_version``.

    Raises
    ------
    ServingError
        The process failed, printed no answer, or ran over ``timeout_s``.
    """
    proc = await asyncio.create_subprocess_exec(*_command(model_uri, version, tracking_uri),
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(body), timeout=timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError) as error:
        proc.kill()
        await proc.wait()
        raise ServingError(f"the cold path for {model_uri} ran over {timeout_s:g} s (cold_timeout_s in "
                           "config/serving.yml); raise it or keep a copy warm") from error
    return _result(proc.returncode, out, err, model_uri)


def score_cold_sync(*, model_uri: str, version: int, tracking_uri: str, body: bytes,
                    timeout_s: float) -> list[dict[str, Any]]:
    """:func:`score_cold` for callers without an event loop (the client's fallback)."""
    try:
        done = subprocess.run(_command(model_uri, version, tracking_uri), input=body, capture_output=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as error:
        raise ServingError(f"the cold path for {model_uri} ran over {timeout_s:g} s; raise the timeout") from error
    return _result(done.returncode, done.stdout, done.stderr, model_uri)


def main(argv: list[str] | None = None) -> int:
    """Load the version, score stdin's rows, print the reply; exit 0, or 1 with a JSON error."""
    parser = argparse.ArgumentParser(prog="lakescore-cold")
    parser.add_argument("--model-uri", required=True)
    parser.add_argument("--version", type=int, required=True)
    parser.add_argument("--tracking-uri", required=True)
    args = parser.parse_args(argv)
    os.environ["MLFLOW_TRACKING_URI"] = args.tracking_uri
    os.environ["MLFLOW_REGISTRY_URI"] = args.tracking_uri
    from lakescore.serving.wire import dumps, parse_request, scored_rows

    try:
        import mlflow.pyfunc  # what a batch job loads

        model = mlflow.pyfunc.load_model(args.model_uri)
        from lakescore.packaging import loaded_input_kinds

        columns = loaded_input_kinds(model)
        parsed = parse_request(sys.stdin.buffer.read(), columns, max_body_bytes=BODY_LIMIT, max_rows=10**7)
        rows = scored_rows(model.predict(parsed.frame), model_version=args.version, served="cold")
    except LakescoreError as err:
        sys.stdout.buffer.write(dumps({"error_code": err.code, "message": str(err)}))
        return 1
    except Exception as err:  # reported to the endpoint, which answers with it
        sys.stdout.buffer.write(dumps({"error_code": "cold_path_failed", "message": f"{type(err).__name__}: {err}"}))
        return 1
    sys.stdout.buffer.write(dumps({"predictions": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
