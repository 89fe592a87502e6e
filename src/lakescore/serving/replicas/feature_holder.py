"""The process that holds a lookup model's feature rows and forks its replicas, so they share the pages.

A replica of a model without lookups is forked from the endpoint's preloaded fork server
(:mod:`lakescore.serving.forkserver`). A replica of a lookup model needs the feature tables too, and
reading them in every replica would read each table once per replica and keep one private copy of the
rows per replica. So the endpoint forks one *holder* from the fork server per lookup version and feature
read: the holder reads each feature table once, at its current version, through the runtime
(:data:`lakescore.serving.features.FeatureReader`), freezes the collector (``gc.freeze``, as the
preload does, so no replica writes to the shared objects), and then forks each replica of that version
itself (``os.fork``): the replicas share the holder's pages of the imports and of the feature rows.

``POST /deploy`` reads the tables again in a new holder (the feature rows of a holder never change);
the old holder stays until its last replica is stopped. A holder exits when its parent (the fork
server) is gone, and its replicas exit when it is gone.

The endpoint talks to a holder over a pipe: ``replica`` (the listening socket goes across as a file
descriptor, ``multiprocessing.reduction.send_handle``) -> the replica's process id; ``poll`` of a replica
-> None while it runs, else its exit code; ``signal`` a replica; ``exit``. The replicas are the holder's
children, not the endpoint's, so only the holder knows for sure whether one still runs: a thread of
the holder reaps each replica and records its exit code in the same step (under one lock), and the holder
signals a replica only while it has not reaped it. A reaped replica's process id can be reused by any
process, so the endpoint never probes or signals a replica's pid itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any

from lakescore.errors import ServingError
from lakescore.serving import forkserver
from lakescore.serving.features import FeatureReader

HOLDER_START_TIMEOUT_S = 300.0
REPLY_TIMEOUT_S = 30.0


class FeatureHolder:
    """A running holder (endpoint side): the feature versions it read, and the replicas it forks.

    Parameters
    ----------
    reader : FeatureReader
        Reads the feature tables (runs in the holder).
    specs : list of dict
        The version's lookup specs (``FeatureLookup.to_json``).
    what : str
        Plain words for messages ("v3's feature tables").

    Raises
    ------
    ServingError
        The holder could not read the feature tables (the reader's error is in the message), died,
        or sent nothing within ``HOLDER_START_TIMEOUT_S`` seconds.
    """

    def __init__(self, reader: FeatureReader, specs: list[dict[str, Any]], *, what: str) -> None:
        ctx = forkserver.context()
        self.what = what
        self.conn, theirs = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=run_holder, args=(theirs, reader, specs, dict(forkserver.child_env)),
                                   daemon=True, name="lakescore-feature-holder")
        try:
            self.process.start()
        finally:
            theirs.close()
        self._lock = threading.Lock()
        kind, value = self._receive(HOLDER_START_TIMEOUT_S)
        if kind != "ready":
            self.stop()
            raise ServingError(f"{what}: the feature tables could not be read ({type(value).__name__}: {value}); "
                               "check that every feature table exists and holds the lookups' columns")
        self.record: list[dict[str, Any]] = value
        self.replicas: set[int] = set()

    @property
    def pid(self) -> int:
        """The holder's process id (a child of the endpoint's fork server; the replicas are its children)."""
        return int(self.process.pid)

    def _receive(self, timeout_s: float) -> tuple[str, Any]:
        try:
            if not self.conn.poll(timeout_s):
                raise ServingError(f"{self.what}: the feature holder sent nothing within {timeout_s:g} s")
            return self.conn.recv()
        except (EOFError, OSError) as err:
            self.process.join(5)
            raise ServingError(f"{self.what}: the feature holder (process {self.pid}) exited with code "
                               f"{self.process.exitcode}; see the endpoint's log") from err

    def fork_replica(self, sock: socket.socket, options: Any, log_path: str) -> int:
        """Fork a replica on the listening ``sock`` from the holder; its process id."""
        from multiprocessing.reduction import send_handle  # the socket crosses as a descriptor

        with self._lock:
            self.conn.send(("replica", options, log_path))
            send_handle(self.conn, sock.fileno(), self.pid)
            kind, value = self._receive(REPLY_TIMEOUT_S)
        if kind != "pid":
            raise ServingError(f"{self.what}: the feature holder could not fork a replica ({value})")
        self.replicas.add(int(value))
        return int(value)

    def _ask(self, *message: Any) -> Any:
        """Send one command and return the value of the holder's reply (one exchange at a time)."""
        with self._lock:
            self.conn.send(message)
            return self._receive(REPLY_TIMEOUT_S)[1]

    def poll_replica(self, pid: int) -> int | None:
        """None while replica ``pid`` runs; its exit code once the holder reaped it (negative: the
        signal that ended it; -1: the holder never forked ``pid``).

        Raises
        ------
        ServingError
            The holder is gone or did not answer within ``REPLY_TIMEOUT_S`` seconds.
        """
        try:
            return self._ask("poll", pid)
        except OSError as err:  # the pipe is closed: the holder was stopped
            raise ServingError(f"{self.what}: the feature holder (process {self.pid}) is stopped") from err

    def signal_replica(self, pid: int, sig: int) -> None:
        """Send ``sig`` to replica ``pid`` when it still runs (a reaped replica's pid is never signalled);
        nothing when the holder is gone (its replicas exit with it)."""
        try:
            self._ask("signal", pid, int(sig))
        except (ServingError, OSError):
            pass

    def stop(self) -> None:
        """Ask the holder to exit (its replicas exit with it), then make sure it is gone (idempotent)."""
        with self._lock:
            try:
                self.conn.send(("exit", None))
            except OSError:
                pass
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
            self.conn.close()


class HeldReplica:
    """A replica forked by a holder, with the ``Popen`` methods the backend uses.

    It is the holder's child, not this process's: whether it runs, its exit code and its signals all
    go through the holder (:meth:`FeatureHolder.poll_replica`, :meth:`FeatureHolder.signal_replica`), never
    through its process id here, which another process may hold once the replica is reaped.
    """

    def __init__(self, holder: FeatureHolder, pid: int) -> None:
        self.holder, self.pid = holder, pid
        self._code: int | None = None

    def poll(self) -> int | None:
        """None while the replica runs, else its exit code, as the holder that reaped it recorded it
        (negative: the signal that ended it). -1 when the holder is gone or does not answer: its
        replicas exit with it (they watch their parent), so the replica counts as exited."""
        if self._code is None:
            try:
                self._code = self.holder.poll_replica(self.pid)
            except ServingError:
                self._code = -1
        return self._code

    def terminate(self) -> None:
        """Ask the replica to stop (SIGTERM, sent by its holder while the replica runs)."""
        self.holder.signal_replica(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        """Kill the replica (SIGKILL, sent by its holder while the replica runs)."""
        self.holder.signal_replica(self.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int | None:
        """Wait until the replica has exited; its exit code (see :meth:`poll`).

        Parameters
        ----------
        timeout : float
            Seconds to wait at most (polled every 0.05 s).

        Raises
        ------
        subprocess.TimeoutExpired
            The replica still runs after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("replica", timeout)
            time.sleep(0.05)
        return self._code


class _Replicas:
    """The holder's side: its replicas that run, and the exit codes of those it reaped. Forking,
    reaping and signalling hold one lock, so a pid is either running here (not reaped: no other
    process can hold it) or has its exit code recorded, never neither."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[int] = set()
        self.codes: dict[int, int] = {}

    def poll(self, pid: int) -> int | None:
        with self.lock:
            return None if pid in self.running else self.codes.get(pid, -1)

    def signal(self, pid: int, sig: int) -> bool:
        with self.lock:
            if pid not in self.running:
                return False
            os.kill(pid, sig)  # not reaped yet: still our child (or its zombie)
            return True

    def reap(self) -> None:
        """Reap the replicas as they exit, forever (a thread of the holder)."""
        while True:
            try:  # wait for an exited child but leave it a zombie: its pid stays ours until recorded
                exited = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:  # no replica yet
                time.sleep(0.2)
                continue
            if exited is None:
                continue
            with self.lock:
                pid, status = os.waitpid(exited.si_pid, 0)
                self.running.discard(pid)
                self.codes[pid] = os.waitstatus_to_exitcode(status)


def run_holder(conn: Any, reader: FeatureReader, specs: list[dict[str, Any]], env: dict[str, str]) -> None:
    """The holder process: read the feature tables, report their versions, fork replicas on demand."""
    import gc

    from lakescore.serving.features import read_features
    from lakescore.serving.replicas.replica import trim_memory

    os.environ.update(env)
    try:
        features = read_features(reader, specs)
    except Exception as err:  # the endpoint raises it with the fix
        conn.send(("error", err))
        return
    trim_memory()
    gc.freeze()  # the replicas never write to the shared objects (the rows' included)
    replicas = _Replicas()
    threading.Thread(target=replicas.reap, daemon=True, name="reap-replicas").start()
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="watch-parent").start()
    conn.send(("ready", features.record()))
    _serve(conn, features, replicas)


def _serve(conn: Any, features: Any, replicas: _Replicas) -> None:
    from multiprocessing.reduction import recv_handle

    from lakescore.serving.replicas.replica import run_forked_replica

    while True:
        try:
            command, *args = conn.recv()
        except (EOFError, OSError):  # the endpoint is gone
            break
        if command == "exit":
            break
        if command == "poll":
            conn.send(("code", replicas.poll(int(args[0]))))
            continue
        if command == "signal":
            conn.send(("signalled", replicas.signal(int(args[0]), int(args[1]))))
            continue
        options, log_path = args
        fd = recv_handle(conn)
        holder = os.getpid()  # what the replica watches: taken here, in case this process exits first
        with replicas.lock:  # recorded as running before the reaper can see it exit
            pid = os.fork()
            if pid != 0:
                replicas.running.add(pid)
        if pid == 0:  # the replica
            code = 0
            try:
                conn.close()
                run_forked_replica(socket.socket(fileno=fd), options, log_path, parent_pid=holder, features=features)
            except BaseException:  # noqa: BLE001 - a replica never returns into the holder's loop
                code = 1
            finally:
                os._exit(code)
        os.close(fd)
        conn.send(("pid", pid))
    os._exit(0)  # the replicas see their parent gone and exit


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(1.0)
