"""A real feature holder (forked from the fork server, reading a real Delta table) and the replicas it
forks: their exit codes and liveness come from the holder, never from probing a process id."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pandas as pd
import psutil
import pytest

from lakescore.lookup import FeatureLookup
from lakescore.runtime import LocalRuntime
from lakescore.serving.replicas.feature_holder import FeatureHolder, HeldReplica
from lakescore.serving.replicas.replica import ReplicaOptions
from lakescore.workflows.serve import read_serving_features

PLANES = "main.t.planes"


@pytest.fixture()
def holder(tmp_path: Path):  # type: ignore[no-untyped-def]
    runtime = LocalRuntime(tmp_path / ".lakescore")
    runtime.write_table(PLANES, pd.DataFrame({"tailnum": ["N1", "N2"], "year": [1999.0, 2004.0]}))
    runtime.write_table(PLANES, pd.DataFrame({"tailnum": ["N3"], "year": [2011.0]}), mode="append")
    spec = FeatureLookup(PLANES, ("tailnum",), ("year",)).to_json()
    held = FeatureHolder(partial(read_serving_features, runtime), [spec], what="test's feature tables")
    try:
        yield held
    finally:
        held.stop()


def fork(holder: FeatureHolder, tmp_path: Path, *, listening: bool) -> HeldReplica:
    """A replica of a model that does not exist: on a listening socket it keeps answering (failed);
    on a socket that does not listen its accept fails and it exits with code 1."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if listening:
            sock.bind(str(tmp_path / "c.sock"))
            sock.listen(1)
        options = ReplicaOptions("models:/nothing/1", 1, f"sqlite:///{tmp_path / 'none.db'}")
        return HeldReplica(holder, holder.fork_replica(sock, options, str(tmp_path / "replica.log")))
    finally:
        sock.close()


def test_a_held_replica_reports_none_while_it_runs_then_the_code_its_holder_reaped(holder, tmp_path) -> None:
    assert holder.record == [{"table": PLANES, "version": 1}]
    replica = fork(holder, tmp_path, listening=True)
    assert psutil.Process(replica.pid).ppid() == holder.pid  # the holder's child, not ours
    time.sleep(0.5)
    assert replica.poll() is None
    replica.kill()
    assert replica.wait(10) == -signal.SIGKILL
    assert replica.poll() == -signal.SIGKILL  # kept

    failing = fork(holder, tmp_path, listening=False)
    assert failing.wait(30) == 1  # run_forked_replica raised: the holder's fork exits with 1
    assert [HeldReplica(holder, p).poll() for p in (replica.pid, failing.pid)] == [-signal.SIGKILL, 1]


def test_a_process_that_holds_a_pid_the_holder_did_not_fork_is_never_taken_for_a_replica(holder) -> None:
    # what a reaped replica's reused pid looks like: a live process the holder has no running replica as
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        replica = HeldReplica(holder, stranger.pid)
        assert replica.poll() == -1  # not alive, whatever signal 0 would say
        replica.terminate()
        replica.kill()
        time.sleep(0.3)
        assert stranger.poll() is None  # never signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_a_held_replica_of_a_stopped_holder_counts_as_exited(holder, tmp_path) -> None:
    replica = fork(holder, tmp_path, listening=True)
    holder.stop()
    assert replica.poll() == -1
    deadline = time.monotonic() + 10  # the replica watches its parent and exits with it
    while psutil.pid_exists(replica.pid) and psutil.Process(replica.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the replica outlived its holder"
        time.sleep(0.2)
    replica.terminate()  # nothing to signal: no error


def test_a_replica_that_starts_after_its_holder_died_exits_too(holder, tmp_path) -> None:
    """The race of a holder that exits right after a fork: the replica has not run yet when its
    parent dies, and it must still exit. Its log is a FIFO, so the replica waits in opening it
    (the first thing it does) until the holder is gone; it then finds itself orphaned rather than
    taking its new parent for the one to watch."""
    log = tmp_path / "replica.fifo"
    os.mkfifo(log)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "c.sock"))
    sock.listen(1)
    options = ReplicaOptions("models:/nothing/1", 1, f"sqlite:///{tmp_path / 'none.db'}")
    pid = holder.fork_replica(sock, options, str(log))
    sock.close()
    holder.stop()  # the holder has exited when this returns; the replica still waits for its log
    reader = os.open(log, os.O_RDONLY | os.O_NONBLOCK)  # lets the replica open its log and go on
    try:
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "an orphaned replica kept running"
            time.sleep(0.2)
    finally:
        os.close(reader)
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
