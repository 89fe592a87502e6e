"""The first-use lock: one holder at a time across processes, released when its holder dies."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from lakescore.errors import StoreBusyError
from lakescore.locking import exclusive

HOLD = """
import sys, time
from pathlib import Path
from lakescore.locking import exclusive
with exclusive(sys.argv[1]):
    Path(sys.argv[2]).touch()
    time.sleep(float(sys.argv[3]))
"""


def _holder(tmp_path, seconds: float) -> subprocess.Popen:
    held = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "locks" / "s.lock"), str(held), str(seconds)])
    deadline = time.monotonic() + 60
    while not held.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the holder never took the lock"
        time.sleep(0.02)
    return proc


def test_a_lock_held_by_another_process_times_out_with_store_busy(tmp_path) -> None:
    proc = _holder(tmp_path, 30)
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusyError, match=r"s\.lock is held by another process for more than 0 s") as err:
            with exclusive(tmp_path / "locks" / "s.lock", timeout_s=0.3):
                pass
        assert err.value.code == "store_busy" and time.monotonic() - started >= 0.3
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_releases_the_lock(tmp_path) -> None:
    proc = _holder(tmp_path, 60)
    proc.kill()
    proc.wait()
    with exclusive(tmp_path / "locks" / "s.lock", timeout_s=5) as lock:
        assert lock == tmp_path / "locks" / "s.lock"


def test_a_waiter_gets_the_lock_when_the_holder_finishes(tmp_path) -> None:
    proc = _holder(tmp_path, 1.0)
    started = time.monotonic()
    with exclusive(tmp_path / "locks" / "s.lock", timeout_s=30):
        assert time.monotonic() - started > 0.5  # it waited for the holder's 1 s, not past it
    proc.wait()
    assert proc.returncode == 0
