"""Where a run's seconds go: wall time per named phase, each phase a library function (not a test).

A benchmark wraps the functions that make up a run (``clock.wrap(module, "name", "phase")``)
before the run and reads :meth:`PhaseClock.seconds` after it. Phases are exclusive: while a
wrapped function runs inside another one (the key check inside the publication), its seconds
count for the inner phase only, so the phases and ``other`` add up to the run's wall time.
Wrapping replaces the attribute for this process only (benchmark children are fresh processes).
Only the calls made on the thread that created the clock count: work a run starts on a thread of
its own (the one pass's key check) counts as the time the run's own thread waits for it, where
the benchmark wraps the wait.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any


class PhaseClock:
    """Exclusive wall seconds per phase, summed over every call of its functions."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[list[Any]] = []  # [phase, started, seconds spent in inner phases]
        self._thread = threading.get_ident()  # the run's thread: calls on others are not timed

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        """Replace ``owner.attribute`` (a module's function or a class's method) with a timed twin
        whose exclusive seconds count for ``phase``."""
        function: Callable[..., Any] = getattr(owner, attribute)

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:
                return function(*args, **kwargs)
            self._stack.append([phase, time.perf_counter(), 0.0])
            try:
                return function(*args, **kwargs)
            finally:
                _, started, inner = self._stack.pop()
                spent = time.perf_counter() - started
                self.totals[phase] = self.totals.get(phase, 0.0) + spent - inner
                if self._stack:
                    self._stack[-1][2] += spent

        setattr(owner, attribute, timed)

    def reset(self) -> None:
        """Forget the seconds counted so far (between a first and a warm call)."""
        self.totals.clear()

    def seconds(self, wall_s: float) -> dict[str, float]:
        """The phases' seconds, in the order they first ran, and ``other``: ``wall_s`` (the run's
        wall seconds) less the phases' sum."""
        return {**self.totals, "other": wall_s - sum(self.totals.values())}
