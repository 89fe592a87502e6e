"""A local home is a folder a user can copy or move: MLflow's recorded artifact URIs follow it.

MLflow's SQLite store records absolute artifact URIs (it resolves a relative one against the
working directory): the experiment's ``artifact_location``, each run's ``artifact_uri``, each logged
model's ``artifact_location`` and each model version's ``storage_location`` (and ``source`` where it
is a path). A copied home would read the original's artifacts, and a moved one would read a folder
that is gone. The home records its own root in one place already: the ``lakescore`` experiment's
``artifact_location`` is ``<home>/mlartifacts`` (:meth:`lakescore.runtime.local.LocalRuntime.mlflow`
creates it so). When the local runtime opens a home whose recorded root is another folder,
:func:`rebase` rewrites every URI under that root to the same place under the current home, in one
SQLite transaction. Registered model names, versions, aliases and tags are not touched.

Only MLflow's database records the home's path. The run store (``runs/*/run.json``), the phase
store, the serving state and the Delta tables' data files address everything relative to the home
or to the table; a Delta log's ``commitInfo.operationParameters.location`` is a record of where a
table was created, read by no reader, and Delta logs are never rewritten.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote, urlparse

ARTIFACTS = "mlartifacts"
"""The folder under the home that holds MLflow's artifacts (the ``lakescore`` experiment's location)."""

URI_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"),
               ("logged_models", "artifact_location"), ("model_versions", "source"),
               ("model_versions", "storage_location"))
"""The (table, column) pairs of MLflow's SQLite schema (3.x) that hold artifact URIs."""


def file_uri_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI or of a plain absolute path; None for any other scheme
    (``models:/``, ``runs:/``, ``dbfs:/``, ...)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def recorded_root(db: Path, experiment: str) -> Path | None:
    """The home that the MLflow database at ``db`` recorded its artifacts under: the parent of
    ``experiment``'s ``artifact_location`` when that is ``<some folder>/mlartifacts``; None when the
    database, the experiment or such a location is missing."""
    if not db.is_file():
        return None
    with closing(sqlite3.connect(db, timeout=60)) as conn:
        row = conn.execute("SELECT artifact_location FROM experiments WHERE name = ?", (experiment,)).fetchone()
    path = file_uri_path(row[0]) if row and row[0] else None
    return path.parent if path is not None and path.name == ARTIFACTS else None


def rebase(db: Path, *, old: Path, new: Path) -> int:
    """Rewrite every artifact URI under ``old`` in the MLflow database ``db`` to the same place
    under ``new`` (``file:`` URIs, percent-encoded as :meth:`pathlib.Path.as_uri` writes them, and
    plain paths), in one transaction.

    Parameters
    ----------
    db : Path
        ``<home>/mlflow.db``, migrated by MLflow (the tables of :data:`URI_COLUMNS` exist; a
        missing table is skipped).
    old, new : Path
        Absolute folders: the recorded root (:func:`recorded_root`) and the current home.

    Returns
    -------
    int
        Values rewritten (0 when nothing was recorded under ``old``).
    """
    prefixes = [(old.as_uri() + "/", new.as_uri() + "/"), (f"{old}/", f"{new}/")]
    changed = 0
    with closing(sqlite3.connect(db, timeout=60, isolation_level=None)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table, column in URI_COLUMNS:
                if table not in tables:
                    continue
                for before, after in prefixes:  # a value matches one prefix at most: file: or /
                    changed += conn.execute(
                        f"UPDATE {table} SET {column} = ? || substr({column}, ?) "  # noqa: S608 (fixed names)
                        f"WHERE substr({column}, 1, ?) = ?",
                        (after, len(before) + 1, len(before), before)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return changed
