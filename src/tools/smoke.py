"""Smoke-test admission on a small sample, locally and without credentials.

  python src/tools/smoke.py --probe sample.csv   # CSV or Parquet, 16+ rows: the table's columns plus the target

The recipe's feature lookups are joined onto the sample from the feature tables of the local
runtime (``--home``), as training joins them; a sample that already carries a lookup's columns is
used as it is. A failure prints one line, as the ``lakescore`` command does (its traceback in
``<home>/logs/``).
"""

import argparse
import sys

from lakescore.cli import report_failure
from lakescore.config import load_project
from lakescore.runtime import get_runtime
from lakescore.workflows.preview import smoke_probe

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--probe", required=True, help="sample file (.csv or .parquet)")
    parser.add_argument("--config-dir", default="config")
    parser.add_argument("--home", default=".lakescore", help="local runtime holding the feature tables")
    parser.add_argument("--debug", action="store_true", help="on an unexpected failure, also print its traceback")
    args = parser.parse_args()
    try:
        lines, admitted = smoke_probe(load_project(args.config_dir), args.probe,
                                      runtime=get_runtime("local", home=args.home))
    except Exception as err:  # one line, as the CLI prints it
        sys.exit(report_failure(err, prog="smoke", log_name="smoke", home=args.home, debug=args.debug))
    print("\n".join(lines))
    sys.exit(0 if admitted else 1)
