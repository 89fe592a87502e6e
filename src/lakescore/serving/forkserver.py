"""The endpoint's preloaded fork server, and short jobs run in children forked from it.

One fork server per endpoint process (multiprocessing's ``forkserver`` start method) imports the
scoring stack once (:mod:`lakescore.serving.replicas.preload`) and loads no model. Replicas are forked from it
(:class:`lakescore.serving.replicas.backend.LocalProcessBackend`), and so are the jobs that need that stack
but must not leave it in the endpoint process, which holds no model: the cold path (load a version
and score, :mod:`lakescore.serving.replicas.cold`), model-registry reads (:mod:`lakescore.serving.plan`) and
inference-table writes (:mod:`lakescore.workflows.serve`). Such a child starts in milliseconds,
because it pays no imports but the ones its job needs beyond the preloaded stack (a registry read
imports MLflow's SQL store, about 0.7 s: see :mod:`lakescore.serving.replicas.preload`), runs one function,
sends back its value (or its exception) through a pipe and exits, so whatever it loaded is gone
with it.

A child's environment is the fork server's, taken when the fork server started, plus
:data:`child_env` (the endpoint sets the MLflow tracking and registry URIs there once it knows them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lakescore.errors import ServingError

PRELOAD = "lakescore.serving.replicas.preload"
child_env: dict[str, str] = {}  # set in every child before its job runs

_CONTEXT: Any = None


@contextmanager
def children_env(**values: str) -> Iterator[None]:
    """:data:`child_env` with ``values`` added while the block runs (an endpoint's lifetime), and as
    it was before once the block ends: a later endpoint or backend of the same process reads its own
    registry, never this one's."""
    before = dict(child_env)
    child_env.update(values)
    try:
        yield
    finally:
        child_env.clear()
        child_env.update(before)


def context() -> Any:
    """The multiprocessing ``forkserver`` context preloading :data:`PRELOAD` (the fork server itself
    starts on the first child)."""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing  # only the preloaded start uses it

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([PRELOAD])
        _CONTEXT = ctx
    return _CONTEXT


def server_pid() -> int | None:
    """Process id of this process's running fork server, or None when none has started."""
    if _CONTEXT is None:
        return None
    from multiprocessing import forkserver  # the pid is kept on the module's one ForkServer

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # noqa: SLF001 - no public accessor
    if pid is None:
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return int(pid)


def running() -> bool:
    """True when this process has a live fork server (jobs then go to its children)."""
    return server_pid() is not None


class Child:
    """A running child forked from the fork server, with the pipe its value comes back through."""

    def __init__(self, process: Any, conn: Any, what: str) -> None:
        self.process, self.conn, self.what = process, conn, what
        self.pid = int(process.pid)

    def result(self, timeout_s: float | None = None) -> Any:
        """Wait for the child's value (blocking); re-raise its exception.

        Raises
        ------
        TimeoutError
            No value after ``timeout_s`` seconds (the child is then killed).
        ServingError
            The child died without sending a value.
        """
        try:
            answered = self.conn.poll(timeout_s)
            kind, value = self.conn.recv() if answered else ("timeout", None)
        except (EOFError, OSError) as err:
            self.process.join(5)
            raise ServingError(f"{self.what} (process {self.pid}) exited with code {self.process.exitcode} "
                               "before answering; see the endpoint's log") from err
        finally:
            self.conn.close()
        if kind == "timeout":
            self.kill()
            raise TimeoutError(f"{self.what} sent no answer within {timeout_s:g} s")
        self.process.join(5)
        if kind == "error":
            raise value  # type: ignore[misc]  # with kind 'error' the process sent an exception
        return value

    def kill(self) -> None:
        """Kill the child now and reap it (idempotent)."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


def start(target: Callable[..., Any], *args: Any, what: str = "a job") -> Child:
    """Fork a child from the fork server (starting the server on first use) that runs
    ``target(*args)``; ``target`` and ``args`` must pickle (a module-level function).

    Parameters
    ----------
    what : str
        Plain words for messages ("the cold path for models:/m/3").
    """
    ctx = context()
    reader, writer = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_run, args=(writer, target, args, dict(child_env)), daemon=True,
                          name=f"lakescore-{getattr(target, '__name__', 'job')}")
    try:
        process.start()
    finally:
        writer.close()  # the child holds its own end: EOF here once it is gone
    return Child(process, reader, what)


def call(target: Callable[..., Any], *args: Any, timeout_s: float | None = None, what: str = "a job") -> Any:
    """``target(*args)`` in a child forked from the fork server; its value, or its exception.

    Raises
    ------
    TimeoutError
        After ``timeout_s`` seconds without an answer (the child is killed).
    ServingError
        The child died without answering.
    """
    return start(target, *args, what=what).result(timeout_s)


def _run(writer: Any, target: Callable[..., Any], args: tuple[Any, ...], env: dict[str, str]) -> None:
    os.environ.update(env)
    try:
        outcome: tuple[str, Any] = ("ok", target(*args))
    except Exception as err:  # sent to the caller, which raises it
        outcome = ("error", err)
    try:
        writer.send(outcome)
    except Exception as err:  # a value or exception that does not pickle: say what it was
        writer.send(("error", ServingError(f"{type(outcome[1]).__name__}: {outcome[1]} (could not be sent back: "
                                           f"{err})")))
    writer.close()
