"""Split training against the sampled fit and one fit on all rows (issue 15; not a test).

One run, in a temporary home, on the local runtime (``local[2]``):

1. the flights demo table replicated to ``--rows`` rows, every copy with fresh record keys
   (``flight_id = 0 .. rows-1``), written as one Delta table;
2. **sampled**: ``lakescore train`` with ``max_rows`` and ``split_training.enabled: false`` (the
   search's sample only);
3. **split**: ``lakescore train`` with ``split_training.enabled: true`` (search, refit on the
   workers, assemble);
4. **all rows** (unless ``--no-full``): the same recipe and model fitted in this process on every
   training row (:func:`lakescore.training.fit_project_chain`), not registered.

All three are measured on the same holdout: the rows split training holds out (stable key hash,
:mod:`lakescore.slices`), at most ``max_rows`` of them, as the search measures it. Wall time is per
phase (search, refit, assemble, as the train summary records them; the total includes admission
and registration). Peak RSS is sampled with psutil every 100 ms: the driver (this Python process
and its JVM) and each Spark Python worker on its own (the largest is reported).

Row counts are table rows before ``data.filter`` (as split training counts them). The first
training run also pays one-time costs (MLflow's store, the first Spark jobs): the sampled fit runs
first, so its total is the pessimistic one.

Target: the split fit's holdout log loss no worse than the sampled fit's, at under 2x its wall time.

Usage: python scripts/bench_split.py [--rows 2000000] [--max-rows 200000] [--min-rows-per-worker 25000]
       [--no-full] [--home DIR]
Prints a table and one JSON line (``BENCH_SPLIT {...}``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
TABLE = "main.flights.flights"


class Peaks:
    """Peak RSS (bytes) of this process + its ``java`` children (the driver) and of each Python
    worker under them, sampled every ``every`` seconds while running."""

    def __init__(self, every: float = 0.1) -> None:
        import psutil

        self.root, self.every = psutil.Process(), every
        self.driver, self.workers = 0, {}  # pid -> peak
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            driver = self.root.memory_info().rss
            for proc in self.root.children(recursive=True):
                try:
                    rss, name = proc.memory_info().rss, proc.name()
                except psutil.Error:
                    continue
                if name == "java":
                    driver += rss
                elif "python" in name:
                    self.workers[proc.pid] = max(self.workers.get(proc.pid, 0), rss)
            self.driver = max(self.driver, driver)
            time.sleep(self.every)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self.thread.join()
        return {"driver_mb": self.driver / 2**20, "worker_mb": max(self.workers.values(), default=0) / 2**20}


def replicated(rows: int) -> pd.DataFrame:
    """The demo flights repeated to ``rows`` rows, each copy with fresh keys."""
    from lakescore.demo_data import demo_frames

    flights = demo_frames()[TABLE]
    copies = -(-rows // len(flights))
    frame = pd.concat([flights] * copies, ignore_index=True).head(rows)
    return frame.assign(flight_id=np.arange(rows, dtype="int64"))


def project_at(home: Path, *, max_rows: int, split: bool, floor: int) -> Any:
    from lakescore.config import load_project
    from lakescore.demo_data import without_feature_lookups

    folder = home / ("config-split" if split else "config-sampled")
    shutil.copytree(REPO / "config", folder, dirs_exist_ok=True)
    path = folder / "training.yml"
    data = without_feature_lookups(yaml.safe_load(path.read_text()))
    data["max_rows"] = max_rows
    data["split_training"] = {"enabled": split, "min_rows_per_worker": floor}
    data["registry"]["model_name"] = "main.flights." + ("split" if split else "sampled")
    path.write_text(yaml.safe_dump(data))
    return load_project(folder)


def holdout_of(project: Any, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(training rows, the search's holdout rows) of ``frame``, filtered, with ``_y``; and the table's
    training rows before the filter (how every row count of split training counts)."""
    from lakescore.slices import in_holdout, key_codes
    from lakescore.split_fit import project_rows

    cfg = project.training
    codes = key_codes(frame, list(cfg.data.record_keys), salt=cfg.split.random_state)
    held = in_holdout(codes["_holdout_code"].to_numpy(), cfg.split.holdout_fraction)
    holdout = frame[held].assign(_order=codes["_order_code"][held]).nsmallest(cfg.max_rows, "_order")
    rows, y = project_rows(project, holdout.drop(columns="_order"))
    training, y_train = project_rows(project, frame[~held])
    return training.assign(_y=y_train), rows.assign(_y=y), int((~held).sum())


def measured(chain: Any, holdout: pd.DataFrame) -> dict[str, float]:
    from lakescore.training import holdout_metrics

    return holdout_metrics(chain, holdout.drop(columns="_y"), holdout["_y"])


def run_train(project: Any, runtime: Any) -> tuple[Any, dict[str, float], float]:
    import mlflow

    from lakescore.saved_models import load_saved
    from lakescore.workflows.train import train

    started = time.perf_counter()
    result = train(project, runtime, retrain="always")
    total = time.perf_counter() - started
    folder = mlflow.artifacts.download_artifacts(f"models:/{result.model_name}/{result.version}/artifacts/chain")
    return result, {**result.split.get("seconds", {}), "total_s": total}, load_saved(folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--max-rows", type=int, default=200_000)
    parser.add_argument("--min-rows-per-worker", type=int, default=25_000)
    parser.add_argument("--no-full", action="store_true", help="skip the fit on all rows")
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")

    from lakescore.runtime import LocalRuntime

    home = args.home or Path(tempfile.mkdtemp(prefix="bench-split-"))
    runtime = LocalRuntime(home / ".lakescore")
    frame = replicated(args.rows)
    runtime.write_table(TABLE, frame)
    runtime.spark()  # started before any clock, and MLflow's store created
    runtime.mlflow()
    report: dict[str, Any] = {"rows": args.rows, "max_rows": args.max_rows}
    for name, split in (("sampled", False), ("split", True)):
        project = project_at(home, max_rows=args.max_rows, split=split, floor=args.min_rows_per_worker)
        peaks = Peaks()
        result, seconds, model = run_train(project, runtime)
        memory = peaks.stop()
        report[name] = {"fit": result.split["fit"], "slices": result.split["slices"], "rows": result.split["rows"],
                        "left_out": result.split["left_out"], **seconds, **memory, "model": model}
    training, holdout, raw_rows = holdout_of(project, frame)
    del frame
    if not args.no_full:
        from lakescore.training import fit_project_chain, prepare_rows

        peaks = Peaks()
        started = time.perf_counter()
        rows, y, pre = prepare_rows(project, training.drop(columns="_y"))
        chain = fit_project_chain(project, rows, y, pre)
        report["all rows"] = {"fit": "one fit", "slices": 1, "rows": raw_rows, "left_out": 0,
                              "total_s": time.perf_counter() - started, **peaks.stop(), "model": chain}
    for entry in report.values():
        if isinstance(entry, dict):
            entry.update({k: v for k, v in measured(entry.pop("model"), holdout).items()
                          if k in ("roc_auc", "log_loss", "holdout_scored_rows")})
    _print(report)
    print("BENCH_SPLIT " + json.dumps(report, default=float))


def _print(report: dict[str, Any]) -> None:
    columns = ["fit", "slices", "rows", "left_out", "roc_auc", "log_loss", "search_s", "refit_s", "assemble_s",
               "total_s", "driver_mb", "worker_mb"]
    print(f"rows {report['rows']:,}, max_rows {report['max_rows']:,}, local[2]; holdout rows scored: "
          f"{int(report['sampled']['holdout_scored_rows']):,}")
    print(f"{'':10}" + "".join(f"{c:>12}" for c in columns))
    for name, entry in report.items():
        if not isinstance(entry, dict):
            continue
        cells = []
        for c in columns:
            value = entry.get(c, "")
            cells.append(f"{value:>12.4f}" if isinstance(value, float) and c in ("roc_auc", "log_loss") else
                         f"{value:>12.1f}" if isinstance(value, float) else f"{value!s:>12}")
        print(f"{name:10}" + "".join(cells))
    ratio = report["split"]["total_s"] / report["sampled"]["total_s"]
    better = report["split"]["log_loss"] <= report["sampled"]["log_loss"]
    print(f"target: split log loss <= sampled ({'met' if better else 'NOT met'}); split wall time {ratio:.2f}x "
          f"the sampled fit's ({'met' if ratio < 2 else 'NOT met'}, target < 2x)")


if __name__ == "__main__":
    main()
