"""The process that holds a lookup model's feature rows and forks its copies, so they share the pages.

A copy of a model without lookups is forked from the endpoint's preloaded fork server
(:mod:`lakescore.serving.forkserver`). A copy of a lookup model needs the feature tables too, and
reading them in every copy would read each table once per copy and keep one private copy of the
rows per copy. So the endpoint forks one *holder* from the fork server per lookup version and feature
read: the holder reads each feature table once, at its current version, through the runtime
(:data:`lakescore.serving.features.FeatureReader`), freezes the collector (``gc.freeze``, as the
preload does, so no copy writes to the shared objects), and then forks each copy of that version
itself (``os.fork``): the copies share the holder's pages of the imports and of the feature rows.

``POST /deploy`` reads the tables again in a new holder (the feature rows of a holder never change);
the old holder stays until its last copy is stopped. A holder exits when its parent (the fork
server) is gone, and its copies exit when it is gone.

The endpoint talks to a holder over a pipe: ``copy`` (the listening socket goes across as a file
descriptor, ``multiprocessing.reduction.send_handle``) -> the copy's process id; ``exit_code`` of a
copy that is gone; ``exit``. A thread of the holder reaps its copies and keeps their exit codes.
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
    """A running holder (endpoint side): the feature versions it read, and the copies it forks.

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
        self.copies: set[int] = set()

    @property
    def pid(self) -> int:
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

    def fork_copy(self, sock: socket.socket, options: Any, log_path: str) -> int:
        """Fork a copy on the listening ``sock`` from the holder; its process id."""
        from multiprocessing.reduction import send_handle  # the socket crosses as a descriptor

        with self._lock:
            self.conn.send(("copy", options, log_path))
            send_handle(self.conn, sock.fileno(), self.pid)
            kind, value = self._receive(REPLY_TIMEOUT_S)
        if kind != "pid":
            raise ServingError(f"{self.what}: the feature holder could not fork a copy ({value})")
        self.copies.add(int(value))
        return int(value)

    def exit_code(self, pid: int) -> int | None:
        """The exit code of a copy that is gone (None when the holder does not know it)."""
        with self._lock:
            try:
                self.conn.send(("exit_code", pid))
                return self._receive(REPLY_TIMEOUT_S)[1]
            except (ServingError, OSError):
                return None

    def stop(self) -> None:
        """Ask the holder to exit (its copies exit with it), then make sure it is gone (idempotent)."""
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


class HeldCopy:
    """A copy forked by a holder, with the ``Popen`` methods the backend uses (it is not this
    process's child: liveness is read with signal 0, the exit code from the holder)."""

    def __init__(self, holder: FeatureHolder, pid: int) -> None:
        self.holder, self.pid = holder, pid
        self._code: int | None = None

    def _alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def poll(self) -> int | None:
        if self._code is None and not self._alive():
            code = self.holder.exit_code(self.pid)
            self._code = -1 if code is None else code
        return self._code

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("copy", timeout)
            time.sleep(0.05)
        return self._code


def run_holder(conn: Any, reader: FeatureReader, specs: list[dict[str, Any]], env: dict[str, str]) -> None:
    """The holder process: read the feature tables, report their versions, fork copies on demand."""
    import gc

    from lakescore.serving.copy_app import trim_memory
    from lakescore.serving.features import read_features

    os.environ.update(env)
    try:
        features = read_features(reader, specs)
    except Exception as err:  # the endpoint raises it with the fix
        conn.send(("error", err))
        return
    trim_memory()
    gc.freeze()  # the copies never write to the shared objects (the rows' included)
    codes: dict[int, int] = {}
    threading.Thread(target=_reap, args=(codes,), daemon=True, name="reap-copies").start()
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="watch-parent").start()
    conn.send(("ready", features.record()))
    _serve(conn, features, codes)


def _serve(conn: Any, features: Any, codes: dict[int, int]) -> None:
    from multiprocessing.reduction import recv_handle

    from lakescore.serving.copy_app import run_forked_copy

    while True:
        try:
            command, *args = conn.recv()
        except (EOFError, OSError):  # the endpoint is gone
            break
        if command == "exit":
            break
        if command == "exit_code":
            conn.send(("code", codes.get(int(args[0]))))
            continue
        options, log_path = args
        fd = recv_handle(conn)
        pid = os.fork()
        if pid == 0:  # the copy
            code = 0
            try:
                conn.close()
                run_forked_copy(socket.socket(fileno=fd), options, log_path, features=features)
            except BaseException:  # noqa: BLE001 - a copy never returns into the holder's loop
                code = 1
            finally:
                os._exit(code)
        os.close(fd)
        conn.send(("pid", pid))
    os._exit(0)  # the copies see their parent gone and exit


def _reap(codes: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.2)
            continue
        codes[pid] = os.waitstatus_to_exitcode(status)


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(1.0)
