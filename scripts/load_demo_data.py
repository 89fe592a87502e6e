"""Load the nycflights13 demo tables into the local runtime (idempotent).

Usage: python scripts/load_demo_data.py [--home .lakescore]
"""

import argparse

from lakescore.runtime import get_runtime
from lakescore.workflows.demo import load_data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".lakescore")
    args = parser.parse_args(argv)
    for table, what in load_data(get_runtime("local", home=args.home)).items():
        print(f"{table}: {what}")


if __name__ == "__main__":
    main()
