"""Smoke-test admission on a small sample, locally and without credentials.

  python src/tools/smoke.py --probe sample.csv   # CSV or Parquet, 16+ rows: input columns plus the target
"""

import argparse
import sys

from lakescore.config import load_project
from lakescore.errors import LakescoreError
from lakescore.workflows.preview import smoke_probe

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--probe", required=True, help="sample file (.csv or .parquet)")
    parser.add_argument("--config-dir", default="config")
    args = parser.parse_args()
    try:
        lines, admitted = smoke_probe(load_project(args.config_dir), args.probe)
    except LakescoreError as err:
        print(f"smoke: {err.code}: {err}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(lines))
    sys.exit(0 if admitted else 1)
