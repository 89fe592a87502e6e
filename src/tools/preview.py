"""Preview admission locally, without credentials.

  python src/tools/preview.py --action train   # lint the recipe and rules, list what would be probed
  python src/tools/preview.py --action score   # the admission decision for the registered version
"""

import argparse
import sys

from lakescore.config import load_project
from lakescore.errors import LakescoreError
from lakescore.runtime import get_runtime
from lakescore.workflows.preview import preview

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--action", choices=["train", "score"], required=True)
    parser.add_argument("--config-dir", default="config")
    parser.add_argument("--home", default=".lakescore")
    args = parser.parse_args()
    try:
        project = load_project(args.config_dir)
        lines = preview(project, get_runtime("local", home=args.home), action=args.action)
    except LakescoreError as err:
        print(f"preview: {err.code}: {err}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(lines))
