"""Bundle task entry point: `lakescore monitor` with the task's parameters (see resources/monitor.job.yml)."""

import sys

from lakescore.cli import main

if __name__ == "__main__":
    sys.exit(main(["monitor", *sys.argv[1:]]))
