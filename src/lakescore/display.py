"""How the ``lakescore`` command prints what a command did: clean JSON, or tables on a terminal.

JSON is strict (NaN and infinities are null), nested values are JSON values, never JSON text
inside a string (a quality row's ``psi``, ``null_share``, ... columns hold JSON text in Delta:
:data:`lakescore.monitoring.quality.JSON_TEXT_COLUMNS`, parsed here), times are ISO 8601 and a
missing value is null. ``lakescore receipts`` and ``lakescore monitor`` print JSON with ``--json``
and whenever standard output is not a terminal (a pipe, a file, a job's log: what scripts read);
on a terminal they print readable tables (rich), or the JSON where rich is not installed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import date, datetime
from typing import Any, TextIO

MISSING = "-"


def plain(value: Any) -> Any:
    """``value`` as strict JSON values: NaN and infinities (a metric with no rows) become None,
    tuples lists, numpy and pandas scalars Python ones, a missing value (``pd.NA``, ``NaT``)
    None, a time its ISO 8601 text."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime, date)):  # pandas' Timestamp is a datetime
        return value.isoformat() if value == value else None  # NaT is no time
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item) and not hasattr(value, "__len__"):
        return plain(item())
    try:
        import pandas as pd  # only to recognise pandas' missing values, loaded by any command that made them

        if pd.isna(value):
            return None
    except (ImportError, TypeError, ValueError):
        pass
    return str(value)


def json_ready(summary: dict[str, Any], *, text_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """:func:`plain` of ``summary`` with each top-level field named in ``text_fields`` that holds
    JSON text parsed to its value (a field whose text is not JSON stays the text)."""
    parsed = {}
    for key, value in summary.items():
        if key in text_fields and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        parsed[key] = value
    return plain(parsed)


def monitor_fields() -> frozenset[str]:
    """The quality row's JSON-text columns (:data:`lakescore.monitoring.quality.JSON_TEXT_COLUMNS`)."""
    from lakescore.monitoring.quality import JSON_TEXT_COLUMNS  # the module that writes them

    return JSON_TEXT_COLUMNS


def _text(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _lines(value: Any, prefix: str = "") -> list[str]:
    """A nested value as ``key: value`` lines, nested keys joined with ``.``."""
    if isinstance(value, dict):
        if not value:
            return [f"{prefix}: {MISSING}" if prefix else MISSING]
        return [line for k, v in value.items() for line in _lines(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list):
        shown = ", ".join(_text(v) for v in value) if all(not isinstance(v, (dict, list)) for v in value) else \
            json.dumps(value)
        return [f"{prefix}: {shown or MISSING}" if prefix else (shown or MISSING)]
    return [f"{prefix}: {_text(value)}" if prefix else _text(value)]


def receipts_table(summary: dict[str, Any]) -> Any:
    """A rich ``Table`` of ``lakescore receipts``: one row per receipt, newest first."""
    from rich.table import Table  # only on a terminal
    from rich.text import Text

    receipts = summary["receipts"]
    table = Table(title=f"{len(receipts)} receipt(s) of {summary['table']}, newest first",
                  caption="lakescore receipts --json prints every field", title_justify="left")
    for column, justify in (("version", "right"), ("committed at", "left"), ("action", "left"),
                            ("run id", "left"), ("model", "left"), ("source versions", "left"),
                            ("rows in", "right"), ("predicted", "right"), ("excluded", "right")):
        table.add_column(column, justify=justify, overflow="fold",  # type: ignore[arg-type]
                         no_wrap=column in ("run id", "committed at"))  # what a user copies stays whole
    for r in receipts:
        first, last = r.get("source_version_from"), r.get("source_version_to")
        versions = f"v{last}" if first is None else f"v{first}..v{last}"
        table.add_row(*map(Text, (_text(r.get("table_version")), _text(r.get("committed_at")), _text(r.get("action")),
                                  _text(r.get("run_id")), f"{r.get('model_name')} v{r.get('model_version')}",
                                  f"{r.get('source_table')} {versions}", _text(r.get("rows_in")),
                                  _text(r.get("predicted")), _text(r.get("excluded")))))
    return table


def monitor_table(summary: dict[str, Any]) -> Any:
    """A rich ``Table`` of ``lakescore monitor``: the last quality row, one field per line (a
    mapping as one ``key: value`` line per entry), alert first."""
    from rich.table import Table  # only on a terminal
    from rich.text import Text

    alert = summary.get("alert")
    title = f"{summary.get('quality_table')}: {summary.get('action')}"
    table = Table("field", "value", title=title, title_justify="left", show_lines=True,
                  caption="lakescore monitor --json prints it as JSON")
    first = ["alert", "alert_reasons"]
    for key in [*(k for k in first if k in summary), *(k for k in summary if k not in (*first, "quality_table", "action"))]:
        value = "\n".join(_lines(summary[key]))
        style = "bold red" if key in first and alert else None
        table.add_row(Text(key), Text(value), style=style)  # Text: a value's [brackets] are no markup
    return table


TABLES: dict[str, tuple[Callable[[dict[str, Any]], Any], Callable[[], frozenset[str]]]] = {
    "receipts": (receipts_table, frozenset),
    "monitor": (monitor_table, monitor_fields),
}
"""The commands that print a table on a terminal: the table, and the summary's JSON-text fields."""


def print_summary(command: str, summary: dict[str, Any], *, stream: TextIO, as_json: bool = False) -> None:
    """Print ``summary`` of ``command`` to ``stream``: indented JSON (:func:`json_ready`), or for
    a command of :data:`TABLES` on a terminal without ``as_json``, its table."""
    render, text_fields = TABLES.get(command, (None, frozenset))
    clean = json_ready(summary, text_fields=text_fields())
    if render is not None and not as_json and stream.isatty():
        try:
            from rich.console import Console  # optional: JSON without it
        except ImportError:
            pass
        else:
            Console(file=stream).print(render(clean))
            return
    print(json.dumps(clean, indent=2), file=stream)
