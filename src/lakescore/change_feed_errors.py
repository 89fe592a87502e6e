"""Tell a lost change-feed window from any other failure to read a change data feed.

A window is lost only when the feed no longer covers its versions; the readers (delta-rs
``load_cdf``, Delta Spark ``readChangeFeed``) say so in these ways, seen on this stack (delta-rs
1.6, Delta Spark 4) or named by Delta's error conditions:

- Delta Spark error conditions: ``DELTA_CHANGE_DATA_FILE_NOT_FOUND`` (a change data file vacuumed),
  ``DELTA_MISSING_CHANGE_DATA`` (the feed was not recorded for a version of the range),
  ``DELTA_LOG_FILE_NOT_FOUND`` and ``DELTA_TRUNCATED_TRANSACTION_LOG`` (the log was cleaned),
  ``DELTA_MISSING_FILES_UNEXPECTED_VERSION``, ``DELTA_FILE_NOT_FOUND_DETAILED``,
  ``DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION``, and Spark's
  ``FAILED_READ_FILE.FILE_NOT_EXIST`` / ``FAILED_READ_FILE.DBR_FILE_NOT_EXIST`` (a data file that the
  log names was vacuumed);
- delta-rs: ``Invalid table version: N`` (the log no longer holds version N), an object store
  ``Object at location ... not found`` (a vacuumed file), and its ``ChangeDataNotRecorded`` /
  ``ChangeDataNotEnabled`` errors (``Change Data not enabled for version ...``, ``... does not have
  change data enabled``).

Anything else (``UNRESOLVED_COLUMN``, ``Schema error: No field named ...``, a start version after
the latest, a permission error) is not a lost window.
"""

from __future__ import annotations

import re

from lakescore.errors import ChangeFeedQueryError, ChangeFeedReadError

LOST_WINDOW_CONDITIONS = (
    "DELTA_CHANGE_DATA_FILE_NOT_FOUND", "DELTA_MISSING_CHANGE_DATA", "DELTA_LOG_FILE_NOT_FOUND",
    "DELTA_TRUNCATED_TRANSACTION_LOG", "DELTA_MISSING_FILES_UNEXPECTED_VERSION", "DELTA_FILE_NOT_FOUND_DETAILED",
    "DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION",
    "FAILED_READ_FILE.FILE_NOT_EXIST", "FAILED_READ_FILE.DBR_FILE_NOT_EXIST",
)
_DELTA_RS_LOST = re.compile(r"Invalid table version: \d+|Object at location \S+ not found|"
                            r"Change Data not enabled for version|does not have change data enabled", re.IGNORECASE)
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)?)\]")


def _texts(err: BaseException) -> list[str]:
    """The text of ``err`` and of every exception it was raised from (``__cause__`` / ``__context__``)."""
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        condition = getattr(current, "getCondition", None)
        try:
            texts.append(f"[{condition()}]" if callable(condition) and condition() else "")
        except Exception:  # a pyspark error without a condition
            texts.append("")
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    return texts


def feed_gone(err: BaseException) -> bool:
    """True when reader error ``err`` says the change data feed no longer covers the versions read
    (see the module note for the conditions and messages); False for any other failure."""
    text = "\n".join(_texts(err))
    conditions = set(_CONDITION.findall(text))
    if any(c in conditions or re.search(rf"\b{re.escape(c)}\b", text) for c in LOST_WINDOW_CONDITIONS):
        return True
    return bool(_DELTA_RS_LOST.search(text))


def reason_of(err: BaseException) -> str:
    """The line of ``err`` that says why, at most 200 characters: the first line that names an error
    condition (``[UNRESOLVED_COLUMN...] ...``), else the first line that is not py4j's
    ``An error occurred while calling ...``, else the error's type."""
    lines = [line.strip().removeprefix(": ").strip() for line in str(err).splitlines() if line.strip()]
    named = [line for line in lines if _CONDITION.search(line)]
    useful = [line for line in lines if not line.startswith("An error occurred while calling")]
    return (named or useful or [type(err).__name__])[0][:200]


def change_feed_error(table: str, first: int, last: int, err: BaseException, *,
                      columns: list[str] | None = None) -> ChangeFeedReadError | ChangeFeedQueryError:
    """The lakescore error for a failure to read the change data feed of ``table``, versions
    ``first``..``last``: raise it ``from err``.

    Parameters
    ----------
    table : str
        Three-part name of the table whose feed was read.
    first, last : int
        The versions read (inclusive).
    err : BaseException
        The reader's error (delta-rs, pyarrow, pyspark or py4j).
    columns : list of str, optional
        The columns the read asked for (named in a :class:`ChangeFeedQueryError`).

    Returns
    -------
    ChangeFeedReadError or ChangeFeedQueryError
        :class:`~lakescore.errors.ChangeFeedReadError` (a lost window: the score workflow says
        ``cdf_recovery_required``) only when :func:`feed_gone`; otherwise
        :class:`~lakescore.errors.ChangeFeedQueryError`, naming the reader's own cause.
    """
    if feed_gone(err):
        return ChangeFeedReadError.reading(table, first, last, reason_of(err))
    return ChangeFeedQueryError.reading(table, first, last, reason_of(err), columns=columns)
