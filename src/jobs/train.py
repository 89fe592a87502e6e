"""Bundle task entry point: `lakescore train` with the task's parameters (see resources/train.job.yml)."""

import sys

from lakescore.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
