"""One file lock for the first use of a store that several processes share.

MLflow's SQLite database, the serving state database and the demo tables are created the first
time any command touches a home. Two commands started at once on a fresh home would both run that
creation: MLflow's schema migrations collide (``_alembic_tmp_* already exists``, ``duplicate column
name``) and leave the database half-migrated for good. :func:`exclusive` serialises that first use
across processes with ``fcntl.flock``: the first process creates the store, the others wait and
then find it made. The kernel drops the lock when its holder exits, so a crashed command never
leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakescore.errors import StoreBusyError

LOCK_TIMEOUT_S = 600.0
_POLL_S = 0.05


@contextmanager
def exclusive(path: str | Path, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[Path]:
    """Hold an exclusive lock on ``path`` (created when missing) for the ``with`` block.

    Parameters
    ----------
    path : str or Path
        The lock file, e.g. ``<home>/locks/mlflow.lock``; its folder is created when missing.
        The file stays (empty) after the block: only the lock on it is released.
    timeout_s : float, default 600
        Seconds to wait for another process's block to end (a first MLflow migration takes
        seconds; ten minutes means that process is stuck).

    Yields
    ------
    Path
        The lock file.

    Raises
    ------
    StoreBusyError
        When another process holds the lock longer than ``timeout_s`` seconds.
    """
    lock = Path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreBusyError(
                        f"lock {lock} is held by another process for more than {timeout_s:.0f} s; "
                        "wait for the other lakescore command on this home to finish (or stop it) "
                        "and run again.", lock=str(lock),
                    ) from None
                time.sleep(_POLL_S)
        try:
            yield lock
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
