"""Bundle task entry point: `lakescore score --publish` with the task's parameters (see resources/score.job.yml)."""

import sys

from lakescore.cli import main

if __name__ == "__main__":
    sys.exit(main(["score", "--publish", *sys.argv[1:]]))
