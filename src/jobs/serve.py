"""Bundle task entry point: `lakescore serve` with the task's parameters (see resources/serve.job.yml)."""

import sys

from lakescore.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
