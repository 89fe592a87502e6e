"""The file statistics of a prediction table lakescore creates: on the columns its reads filter by.

Delta keeps a minimum, a maximum and a null count per data file for the first 32 columns of a
table by default, and computes them for every row it writes. A reader skips the files whose
statistics rule out its filter. A prediction table is filtered by:

- its record keys: the check that an append's keys are new reads only the files whose key range
  holds one of them (:func:`lakescore.publish.spark_delta.repeated_keys`), and users look rows up by key;
- ``publication.period_column``: a period's replacement deletes the files of that period;
- ``run_id`` and ``model_version``: one run's or one version's rows (monitoring, the quality
  row), constant within each file a publication writes, so a filter on them skips every other
  run's files.

The model's outputs, ``scoring_status``, ``exclusion_reason`` and ``model_name`` are read whole:
every file spans their range, so their statistics skip nothing, yet they cost each write. A table
lakescore creates therefore names its statistics columns (Delta's table property
``delta.dataSkippingStatsColumns``, :func:`new_table_properties`), with both engines. A table that
already exists keeps its own properties: lakescore never changes them
(``ALTER TABLE <table> SET TBLPROPERTIES`` does).

Measured by ``scripts/bench_spark_publish.py`` (docs, Figures: Publication (Spark)).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from lakescore.runtime.sql_text import quoted_name

STATS_COLUMNS = "delta.dataSkippingStatsColumns"
"""Delta's table property naming the columns with file statistics (comma-separated)."""
READ_BY = ("run_id", "model_version")
"""The columns lakescore adds that reads filter by (see the module)."""
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def stats_columns(columns: Iterable[str], *, keys: Iterable[str] = (), period_column: str | None = None) -> tuple[str, ...]:
    """The columns of a new prediction table that get file statistics: ``keys``, then
    ``period_column``, then :data:`READ_BY`, those of them in ``columns``, each once.

    >>> stats_columns(["flight_id", "probability", "run_id", "model_version"], keys=["flight_id"], period_column="day")
    ('flight_id', 'run_id', 'model_version')
    """
    present = set(columns)
    wanted = [*keys, *([period_column] if period_column else []), *READ_BY]
    return tuple(name for name in dict.fromkeys(wanted) if name in present)


def new_table_properties(columns: Iterable[str], *, keys: Iterable[str] = (),
                         period_column: str | None = None) -> dict[str, str]:
    """The table properties a new prediction table is created with: ``{STATS_COLUMNS: "a,b"}``
    naming :func:`stats_columns` (a name other than letters, digits and ``_`` in backticks), or
    none when no such column is in ``columns``.

    >>> new_table_properties(["key id", "run_id", "p"], keys=["key id"])
    {'delta.dataSkippingStatsColumns': '`key id`,run_id'}
    """
    chosen = stats_columns(columns, keys=keys, period_column=period_column)
    if not chosen:
        return {}
    return {STATS_COLUMNS: ",".join(name if _PLAIN.fullmatch(name) else quoted_name(name) for name in chosen)}


def named_stats_columns(configuration: Mapping[str, str] | None) -> frozenset[str] | None:
    """The top-level columns a table's ``configuration`` gives statistics to by
    :data:`STATS_COLUMNS` (backticks removed), or None when it does not name them (Delta's
    default: the first columns).

    >>> sorted(named_stats_columns({STATS_COLUMNS: "`key id`, run_id,`a``b`"}))
    ['a`b', 'key id', 'run_id']
    >>> named_stats_columns({}) is None
    True
    """
    text = (configuration or {}).get(STATS_COLUMNS)
    if not text or not text.strip():
        return None
    names = re.findall(r"\s*(`(?:[^`]|``)*`|[^,`]+)\s*(?:,|$)", text)
    return frozenset(n[1:-1].replace("``", "`") if n.startswith("`") else n.strip() for n in names)
