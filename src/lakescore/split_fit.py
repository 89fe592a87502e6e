"""One slice of split training, as a worker fits it: the searched configuration's whole chain
(its own preprocessing state and model) on the slice's rows.

Pure pandas and Arrow: the Spark glue (``groupBy(slice).applyInArrow``) is in
:mod:`lakescore.workflows.split_train`. A slice of more than ``max_rows`` rows is cut to the
``max_rows`` rows of the smallest ``_order_code`` (:mod:`lakescore.slices`), and the rows left out
are counted. A slice whose fit raises returns the error's text instead of a chain, so one bad
slice never takes the others down.
"""

from __future__ import annotations

import pickle
from typing import Any, Literal

import pandas as pd
import pyarrow as pa

from lakescore.config import ProjectConfig
from lakescore.frames import derive_label, nullable_pandas_type
from lakescore.slices import CODE_COLUMNS
from lakescore.training import fit_project_chain

SLICE_COLUMN = "_slice"
HOLDOUT_COLUMN = "_holdout"
HELPER_COLUMNS = (*CODE_COLUMNS, SLICE_COLUMN, HOLDOUT_COLUMN)
RESULT_SCHEMA = pa.schema([("slice", pa.int64()), ("rows", pa.int64()), ("fitted", pa.int64()),
                           ("chain", pa.binary()), ("error", pa.string())])
"""One row per slice: its rows, the rows fitted, the pickled ``FittedChain`` (or null) and the error."""
Fault = Literal["no_workers", "slices", "assemble"]


def project_rows(project: ProjectConfig, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """``data.filter`` and the label of raw rows (the pre-split recipe is re-applied by the fit itself)."""
    cfg = project.training
    if cfg.data.filter:
        frame = frame.query(cfg.data.filter, engine="python")
    y = derive_label(frame, column=cfg.data.label_column, expression=cfg.data.label_expression)
    return frame, y.set_axis(frame.index)


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """A table as the single-node route reads it: integers ``Int64``, booleans ``boolean``."""
    return table.to_pandas(types_mapper=nullable_pandas_type)


def fit_slice(project: ProjectConfig, pre: Any, table: pa.Table, *, max_rows: int,
              fault: Fault | None = None) -> pa.Table:
    """Fit the project's chain on one slice (the rows of ``table``, all of one ``_slice``).

    Parameters
    ----------
    project : ProjectConfig
    pre : PreSplit
        The pre-split recipe the search learned (re-applied to the slice, never re-learned).
    table : pyarrow.Table of shape (n_rows, n_columns)
        The slice's raw rows with :data:`HELPER_COLUMNS`.
    max_rows : int
        training.yml ``max_rows``: the most rows one process fits.
    fault : {"no_workers", "slices", "assemble"} or None
        An injected fault (tests): ``slices`` makes this fit raise; ``no_workers`` makes the worker
        fail outright (the Spark job fails).

    Returns
    -------
    pyarrow.Table of one row, schema :data:`RESULT_SCHEMA`.
    """
    if fault == "no_workers":
        raise RuntimeError("injected fault: the worker died before fitting its slice")
    frame = arrow_frame(table)
    number = int(frame[SLICE_COLUMN].iloc[0])
    rows = len(frame)
    if rows > max_rows:
        frame = frame.nsmallest(max_rows, "_order_code")
    try:
        if fault == "slices":
            raise RuntimeError(f"injected fault: slice {number} failed")
        data, y = project_rows(project, frame.drop(columns=list(HELPER_COLUMNS)))
        chain = fit_project_chain(project, data, y, pre)
        blob, error = pickle.dumps(chain), None
    except Exception as err:  # reported per slice: the others still count
        blob, error = None, f"{type(err).__name__}: {err}"
    return pa.table({"slice": [number], "rows": [rows], "fitted": [len(frame)], "chain": [blob], "error": [error]},
                    schema=RESULT_SCHEMA)
