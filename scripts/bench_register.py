"""One registration (``lakescore.packaging.log_and_register``) of the demo project's chain, with its
requirements declared by lakescore and with MLflow inferring them, in one process (not a test).

- chain: the project's own (config/), fitted on the first ``--fit-rows`` of every 50th flight with
  the feature lookups joined (as ``scripts/bench_admission.py`` fits it), admitted once (untimed);
- store: MLflow in SQLite in a temporary local home (``LocalRuntime.mlflow``), one run per
  registration, every version registered under one name;
- ``declared``: ``log_and_register`` as training calls it (``requirements.txt`` from
  :func:`lakescore.model_requirements.pip_requirements`);
- ``inferred``: the same call with ``pip_requirements`` taken out before ``mlflow.pyfunc.log_model``,
  so MLflow infers the list by loading the model in a child Python process, as it does by default.

The two kinds alternate, ``--repeats`` of each after one untimed call of each (imports, first
calls). Prints the median wall seconds per registration of each kind, their ratio, the two
requirements lists, and one JSON line (``BENCH_REGISTER {...}``).

Usage: python scripts/bench_register.py [--repeats 5] [--fit-rows 1200] [--config-dir config]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def inferring_log_model(**kwargs: Any) -> Any:
    """``mlflow.pyfunc.log_model`` without ``pip_requirements``: MLflow's default inference."""
    import mlflow

    kwargs.pop("pip_requirements", None)
    return mlflow.pyfunc.log_model(**kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fit-rows", type=int, default=1200)
    parser.add_argument("--config-dir", default="config")
    args = parser.parse_args(argv)

    import mlflow
    from bench_predict import sample_rows  # its rows (scripts/ is on the path as a script runs from it)

    from lakescore.admission.evidence import admit
    from lakescore.config import load_project
    from lakescore.packaging import log_and_register
    from lakescore.runtime import LocalRuntime
    from lakescore.training import fit_project_chain, prepare_rows

    project = load_project(args.config_dir)
    frame, y, pre = prepare_rows(project, sample_rows(project))
    chain = fit_project_chain(project, frame.iloc[:args.fit_rows], y.iloc[:args.fit_rows], pre)
    evidence = admit(chain, frame.iloc[args.fit_rows:])
    kinds = {"declared": None, "inferred": inferring_log_model}
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    requirements: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        LocalRuntime(Path(tmp) / ".lakescore").mlflow()
        for round_ in range(args.repeats + 1):
            for kind, log_model in kinds.items():
                with mlflow.start_run():
                    start = time.perf_counter()
                    model = log_and_register(chain, example=frame.head(5), name="main.bench.register", alias=None,
                                             evidence=evidence, log_model=log_model)
                    took = time.perf_counter() - start
                if round_:  # the first round is untimed
                    seconds[kind].append(took)
                folder = Path(mlflow.artifacts.download_artifacts(model.model_uri))
                requirements[kind] = (folder / "requirements.txt").read_text().splitlines()
    median = {kind: statistics.median(values) for kind, values in seconds.items()}
    for kind in kinds:
        print(f"{kind:9s} {median[kind]:6.2f} s per registration (median of {args.repeats})  "
              f"requirements: {', '.join(requirements[kind])}")
    ratio = median["inferred"] / median["declared"]
    print(f"inferred / declared: {ratio:.1f}x")
    print("BENCH_REGISTER " + json.dumps({"median_s": median, "ratio": ratio, "requirements": requirements,
                                          "repeats": args.repeats, "fit_rows": args.fit_rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
