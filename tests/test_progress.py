"""Progress: plain lines off a terminal, a rich live display on one."""

import io
import re

import pytest

from lakescore import progress
from lakescore.progress import LineReporter, reporter_for


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_off_a_terminal_each_step_prints_plain_lines(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    with progress.use(LineReporter(out, every_s=10)):
        with progress.step("score (single_node)", total=84292) as s:
            clock.now += 4
            s.advance(40000)  # 4 s after the start: too soon for a line
            clock.now += 8
            s.advance(20000)  # 12 s: one line
            clock.now += 3.3
            s.advance(24292)
    assert out.getvalue().splitlines() == [
        "lakescore: score (single_node): started (84,292 rows)",
        "lakescore: score (single_node): 60,000/84,292 rows, 12.0 s",
        "lakescore: score (single_node): done, 84,292/84,292 rows in 15.3 s",
    ]


def test_a_failed_step_says_so_and_the_error_goes_on(monkeypatch):
    out = io.StringIO()
    with progress.use(LineReporter(out)), pytest.raises(KeyError):
        with progress.step("train: fit recipe and model"):
            raise KeyError("x")
    assert re.fullmatch(r"lakescore: train: fit recipe and model: failed in \d+\.\d s",
                        out.getvalue().splitlines()[-1])


def test_a_pipe_gets_plain_lines_by_default(capsys):
    assert isinstance(reporter_for(io.StringIO()), LineReporter)
    with progress.step("demo: load tables") as s:
        s.advance(3)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "lakescore: demo: load tables: started"
    assert re.fullmatch(r"lakescore: demo: load tables: done, 3 rows in \d+\.\d s", err[1])


def test_on_a_terminal_rich_draws_steps_rows_and_elapsed_time():
    rich = pytest.importorskip("rich", reason="rich is the optional terminal display (pip install rich)")
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100, color_system=None)
    with progress.use(progress.RichReporter(console)):
        with progress.step("score (spark)", total=1000) as s:
            s.advance(400)
            with progress.step("publish"):
                pass
            s.advance(600)
    text = buffer.getvalue()
    assert rich.__name__ == "rich"
    assert "score (spark)" in text and "1,000/1,000 rows" in text and "publish" in text
    assert re.search(r"0:00:0\d", text)  # elapsed time column
    assert "lakescore:" not in text  # no plain lines on a terminal


def test_a_terminal_without_rich_falls_back_to_lines(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_rich(name, *args, **kwargs):
        if name.startswith("rich"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(builtins, "__import__", no_rich)
    assert isinstance(reporter_for(Tty()), LineReporter)


def test_rows_known_only_at_the_end_show_on_the_end_line_once(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    out = io.StringIO()
    with progress.use(LineReporter(out, every_s=10)), progress.step("score (spark)") as s:
        clock.now += 76
        s.total_rows(84292)
    assert out.getvalue().splitlines() == ["lakescore: score (spark): started",
                                           "lakescore: score (spark): done, 84,292 rows in 76.0 s"]
