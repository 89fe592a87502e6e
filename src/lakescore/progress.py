"""Progress of long local work (training, admission, scoring, the demo): one seam, :func:`step`.

Workflows wrap each long step in ``with progress.step("train: fit", total=rows) as s:`` and call
``s.advance(rows)`` as rows are done. Where it shows depends on the output:

- on a terminal, with ``rich`` installed: a live line per step with a spinner, a bar when the total
  is known, rows done and elapsed time (rich's ``Progress``);
- anywhere else (job logs on Databricks, CI, a pipe): plain lines, one when a step starts, at most
  one every ``every_s`` seconds while it advances, and one when it ends, e.g.
  ``lakescore: score (spark): done, 84,292 rows in 41.2 s``.

Progress goes to standard error, so a command's JSON summary on standard output stays clean.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO


@dataclass
class Step:
    """One running step: its name, rows done (of ``total`` when known) and start time."""

    name: str
    total: int | None = None
    rows: int = 0
    started: float = field(default_factory=lambda: time.monotonic())
    _reporter: Any = field(default=None, repr=False)

    def advance(self, rows: int) -> None:
        """Count ``rows`` more rows done."""
        self.rows += int(rows)
        if self._reporter is not None:
            self._reporter.update(self)

    def total_rows(self, rows: int) -> None:
        """Record, at the end, that the step did ``rows`` rows in all (shown on its end line only)."""
        self.rows = int(rows)

    @property
    def elapsed_s(self) -> float:
        """Seconds since the step started."""
        return time.monotonic() - self.started


class Reporter(Protocol):
    """Where steps are shown (:class:`LineReporter` or :class:`RichReporter`)."""

    def start(self, step: Step) -> None: ...
    def update(self, step: Step) -> None: ...
    def finish(self, step: Step, *, failed: bool) -> None: ...


def _rows(step: Step) -> str:
    if step.total is not None:
        return f"{step.rows:,}/{step.total:,} rows"
    return f"{step.rows:,} rows" if step.rows else ""


class LineReporter:
    """Plain lines for logs: start, at most one update every ``every_s`` seconds, end.

    Parameters
    ----------
    stream : text stream, default ``sys.stderr`` at the time of each write
    every_s : float, default 10
        Least seconds between two update lines of one step.
    """

    def __init__(self, stream: TextIO | None = None, *, every_s: float = 10.0) -> None:
        self.stream = stream
        self.every_s = every_s
        self._last: dict[int, float] = {}

    def _write(self, text: str) -> None:
        print(f"lakescore: {text}", file=self.stream or sys.stderr, flush=True)

    def start(self, step: Step) -> None:
        self._last[id(step)] = step.started
        self._write(f"{step.name}: started" + (f" ({step.total:,} rows)" if step.total is not None else ""))

    def update(self, step: Step) -> None:
        now = time.monotonic()
        if now - self._last.get(id(step), step.started) >= self.every_s:
            self._last[id(step)] = now
            self._write(f"{step.name}: {_rows(step)}, {step.elapsed_s:.1f} s")

    def finish(self, step: Step, *, failed: bool) -> None:
        self._last.pop(id(step), None)
        rows = _rows(step)
        self._write(f"{step.name}: {'failed' if failed else 'done'}{', ' + rows if rows else ''} "
                    f"in {step.elapsed_s:.1f} s")


class RichReporter:
    """A live rich ``Progress`` on a terminal: one task per step, nested steps as more tasks.

    Parameters
    ----------
    console : rich.console.Console, optional
        Default: a console on standard error.
    """

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console  # only on a terminal: rich is optional

        self.console = console or Console(stderr=True)
        self._progress: Any = None
        self._tasks: dict[int, Any] = {}

    def _make(self) -> Any:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        return Progress(SpinnerColumn(finished_text="✓"), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.fields[rows]}"), TimeElapsedColumn(), console=self.console)

    def start(self, step: Step) -> None:
        if self._progress is None:
            self._progress = self._make()
            self._progress.start()
        self._tasks[id(step)] = self._progress.add_task(step.name, total=step.total, rows=_rows(step))

    def update(self, step: Step) -> None:
        self._progress.update(self._tasks[id(step)], completed=step.rows, rows=_rows(step))

    def finish(self, step: Step, *, failed: bool) -> None:
        task = self._tasks.pop(id(step))
        name = f"{step.name} [red](failed)[/red]" if failed else step.name
        total = step.total if step.total is not None else max(step.rows, 1)
        self._progress.update(task, description=name, total=total, completed=step.rows if failed else total,
                              rows=_rows(step))
        self._progress.stop_task(task)
        if not self._tasks:
            self._progress.stop()
            self._progress = None


def reporter_for(stream: TextIO) -> Reporter:
    """:class:`RichReporter` when ``stream`` is a terminal and rich is installed, else :class:`LineReporter`."""
    if stream.isatty():
        try:
            from rich.console import Console  # optional: plain lines without it
        except ImportError:
            return LineReporter(stream)
        return RichReporter(Console(file=stream))
    return LineReporter(stream)


_current: Reporter | None = None


@contextmanager
def use(reporter: Reporter) -> Iterator[Reporter]:
    """Show the steps of the ``with`` block with ``reporter`` (tests, or a caller's own console)."""
    global _current
    before, _current = _current, reporter
    try:
        yield reporter
    finally:
        _current = before


@contextmanager
def step(name: str, *, total: int | None = None) -> Iterator[Step]:
    """Show a long step while the ``with`` block runs.

    Parameters
    ----------
    name : str
        What runs, e.g. ``"train: fit recipe and model"``.
    total : int, optional
        Rows the step will do, when known (a bar is drawn on a terminal).

    Yields
    ------
    Step
        Call ``advance(rows)`` on it as rows are done.
    """
    if _current is None:  # an outermost step: pick the output now (pytest and jobs swap stderr)
        with use(reporter_for(sys.stderr)), step(name, total=total) as outer:
            yield outer
        return
    reporter = _current
    current = Step(name, total=total, _reporter=reporter)
    reporter.start(current)
    failed = True
    try:
        yield current
        failed = False
    finally:
        reporter.finish(current, failed=failed)
