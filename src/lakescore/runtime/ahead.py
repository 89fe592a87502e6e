"""A Spark action started now and waited for later: it runs on a thread of its own while the
calling thread goes on with driver work, so the executors compute it in the meantime.

The thread carries the calling thread's job properties, as pyspark's ``InheritableThread`` does:
on a classic session (in pyspark's pinned-thread mode, its default) its JVM local properties (the
job group a cancel reaches, the scheduler pool, what a Databricks job sets for its runs and its
identity), on Spark Connect its operation tags. Its own jobs also carry a tag of their own, so
that a caller that gives up (an error, Ctrl-C) cancels them instead of waiting for them. The score
workflow checks the one pass's keys this way while the driver copies the model and sets up the
UDF (:meth:`lakescore.workflows.routes.spark.SparkRoute.check_ahead`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Ahead(Generic[T]):
    """``work()`` started on a thread of its own (see the module); :meth:`result` waits for it.

    Used as a context manager, nothing the work runs outlives the block (the session settings
    the block restores, a model folder it removes): leaving it waits for the work, and a block
    left by an error first cancels the work's Spark jobs (:meth:`cancel`).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session ``work`` runs its actions on (classic or Spark Connect).
    work : callable
        ``() -> T``: what runs on the thread.
    """

    def __init__(self, spark: Any, work: Callable[[], T]) -> None:
        self._spark, self._tag = spark, f"lakescore-ahead-{uuid.uuid4().hex}"
        self._connect = _is_connect(spark)
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = _carrying_thread(spark, self._run, work)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            if self._connect:  # this thread's operations (the tags are per thread)
                self._spark.addTag(self._tag)
            else:  # this thread's jobs (a local property: per thread), beside the job group it inherited
                self._spark.sparkContext.addJobTag(self._tag)
            self._value = work()
        except BaseException as err:  # handed to the caller by result()
            self._error = err

    def cancel(self) -> None:
        """Cancel the work's Spark jobs and wait for the work to end (it then raises Spark's
        cancellation, which :meth:`result` would give). Jobs it submits while this waits are
        cancelled too: the cancel is repeated every 0.2 s until the thread ends."""
        while self._thread.is_alive():
            if self._connect:
                self._spark.interruptTag(self._tag)
            else:
                self._spark.sparkContext.cancelJobsWithTag(self._tag)
            self._thread.join(0.2)

    def result(self) -> T:
        """Wait for the work; its value.

        Raises
        ------
        BaseException
            Whatever the work raised, as it raised it.
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set when no error was

    def __enter__(self) -> Ahead[T]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is not None:  # the caller gave up: its error goes on, the work's is dropped
            self.cancel()
        self._thread.join()


def _carrying_thread(spark: Any, target: Callable[..., None], work: Callable[[], Any]) -> threading.Thread:
    """A daemon thread running ``target(work)`` with the calling thread's job properties:
    pyspark's ``InheritableThread``, where pyspark's process-wide idea of the session kind
    (``is_remote``) is this session's. A process that holds both kinds (a test suite that made
    a Spark Connect session beside a classic one) gets a plain thread for the other kind."""
    from pyspark import InheritableThread
    from pyspark.sql.utils import is_remote

    if _is_connect(spark) == is_remote():
        return InheritableThread(target, session=spark, args=(work,), daemon=True)
    return threading.Thread(target=target, args=(work,), daemon=True)


def _is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (else a classic one)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
