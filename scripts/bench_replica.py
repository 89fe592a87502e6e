"""A warm replica's CPU per one-row request, in process (not a test): where a request's time goes
once it has reached the replica, without HTTP, the channel or the client threads.

Loads the demo model's champion (trained without feature lookups into ``--home`` when it has none,
as ``bench_serving.py`` trains it) the way a replica loads it (``LoadedVersion.load``: the pyfunc,
its certificate verified), turns ``--requests`` one-row requests of the demo's incoming flights into
what the endpoint forwards (``parse_request(...).to_body()``), then times, per request, the replica's
whole answer (``replica.answer``: status and JSON bytes) and its three parts:

  ``frame``    the forwarded body read into the request's pandas frame (``forwarded(...).frame``)
  ``score``    the pyfunc's ``predict`` on it (conformance, then ``FittedChain.predict``)
  ``reply``    the scored frame as JSON rows (``scored_rows``, then ``dumps``)

p50 and p90 in ms, after 200 untimed answers (``bench_predict.percentiles``); CPU time of this thread (``time.thread_time``) unless
``--clock wall``, so that a run on a shared machine compares with another.

Usage: python scripts/bench_replica.py [--home H] [--requests 2000] [--clock cpu|wall]
Prints the figures and one JSON line (``BENCH_REPLICA {...}``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_predict import WARM, percentiles  # scripts/ is on sys.path
from serving_bench import MODEL, bench_config, champion, request_bodies

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=None, help="runtime home with (or to get) the demo model; default: temp")
    parser.add_argument("--requests", type=int, default=2000, help="one-row requests timed (default 2000)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    from lakescore.serving.http.wire import dumps, forwarded, parse_request, scored_rows
    from lakescore.serving.replicas.channel import SCORE
    from lakescore.serving.replicas.replica import LoadedVersion, answer

    scratch = Path(tempfile.mkdtemp(prefix="bench-replica-"))
    home = Path(args.home).resolve() if args.home else scratch / ".lakescore"
    version = champion(home, bench_config(REPO, scratch, {}))
    loaded = LoadedVersion(f"models:/{MODEL}/{version}", version)
    loaded.load()
    if loaded.state != "ready":
        raise SystemExit(f"the model did not load: {loaded.error}")
    n = args.requests + WARM
    bodies = request_bodies(home, version, n)
    payloads = [parse_request(b, loaded.columns, max_body_bytes=1 << 20, max_rows=1).to_body() for b in bodies]
    payloads = [payloads[i % len(payloads)] for i in range(n)]  # fewer incoming flights than asked: again
    frames = [forwarded(p, loaded.columns).frame for p in payloads]
    scored = [loaded.score(f) for f in frames]
    status, body = answer(loaded, SCORE, payloads[0])
    if status != 200:
        raise SystemExit(f"the replica answered {status}: {body[:300]!r}")

    figures = {
        "answer": percentiles(lambda p: answer(loaded, SCORE, p), payloads, timer=clock),
        "frame": percentiles(lambda p: forwarded(p, loaded.columns).frame, payloads, timer=clock),
        "score": percentiles(loaded.score, frames, timer=clock),
        "reply": percentiles(lambda s: dumps(scored_rows(s, model_version=version, served="warm")), scored,
                             timer=clock),
    }
    import lakescore

    print(f"model models:/{MODEL}/{version}, {len(loaded.columns)} input columns; {args.requests} one-row "
          f"requests; clock {args.clock}; lakescore from {lakescore.__file__}")
    print(f"{'':8}{'p50 ms':>9}{'p90 ms':>9}")
    for name, fig in figures.items():
        print(f"{name:8}{fig['p50']:>9.3f}{fig['p90']:>9.3f}")
    print("BENCH_REPLICA " + json.dumps({"version": version, "columns": len(loaded.columns), **figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
