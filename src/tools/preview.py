"""Preview admission locally, without credentials.

  python src/tools/preview.py --action train   # lint the recipe and rules, list what would be probed
  python src/tools/preview.py --action score   # the admission decision for the registered version

A failure prints one line, as the ``lakescore`` command does (its traceback in ``<home>/logs/``).
"""

import argparse
import sys

from lakescore.cli import report_failure
from lakescore.config import load_project
from lakescore.runtime import get_runtime
from lakescore.workflows.preview import preview

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--action", choices=["train", "score"], required=True)
    parser.add_argument("--config-dir", default="config")
    parser.add_argument("--home", default=".lakescore")
    parser.add_argument("--debug", action="store_true", help="on an unexpected failure, also print its traceback")
    args = parser.parse_args()
    try:
        project = load_project(args.config_dir)
        lines = preview(project, get_runtime("local", home=args.home), action=args.action)
    except Exception as err:  # one line, as the CLI prints it
        sys.exit(report_failure(err, prog="preview", log_name="preview", home=args.home, debug=args.debug))
    print("\n".join(lines))
