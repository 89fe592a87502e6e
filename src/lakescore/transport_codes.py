"""The Spark route's code tables: text outputs cross the UDF boundary as small integers.

``mlflow.pyfunc.spark_udf`` converts every string field of a struct result row by row
(``astype(np.str_)``); an int64 field it hands to Arrow as it is. So on the Spark route the pyfunc
sends ``scoring_status``, ``exclusion_reason`` and, for a classifier of text classes
(``chain.label_dtype == "string"``), ``prediction`` as the position of the value in a table that
the chain itself determines (:func:`code_tables`), with the null mask of
:func:`lakescore.frames.to_transport`; the driver builds the same tables from the same saved chain
and decodes each code with a literal array (:func:`decode_sql`). The single-node route and
serving keep strings.

Every reason a chain can give is enumerable from it (:func:`reason_table`); a value missing from a
table is refused (:class:`~lakescore.errors.TransportCodeError`), never decoded as another value.

This is a wire format that the logged pyfunc (:mod:`lakescore.packaging`, which encodes) and the
Spark route (:mod:`lakescore.scoring.spark`, which decodes) share, so it sits below both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lakescore.chain import STATUS_EXCLUDED, STATUS_PREDICTED, FittedChain
from lakescore.errors import TransportCodeError
from lakescore.model_set import ModelSet, component_reason
from lakescore.pasting import PastingEnsemble
from lakescore.saved_models import load_saved

STATUSES = (STATUS_PREDICTED, STATUS_EXCLUDED)
"""Code table of ``scoring_status``: 0 predicted, 1 excluded."""


def reason_table(chain: FittedChain) -> tuple[str, ...]:
    """Every ``exclusion_reason`` that ``chain`` (through the pyfunc) can give, each once, in this
    order (a code is the position):

    1. each eligibility rule's ``rule.reason`` (``ineligible:<rule>``), rule order;
    2-3. ``<prefix>:<step>`` for each scoring step that excludes rows, in ``chain.scoring_steps()``
       order: ``ineligible:`` for a pre-split step re-applied as eligibility, then the recipe's
       ``outlier:`` / ``invalid:`` steps;
    4. ``invalid:<column>`` for each input column: a value of the wrong kind, found by
       :func:`lakescore.conform.conform_inputs` and put back by
       :func:`lakescore.packaging.with_excluded_rows`;
    5. ``invalid:<feature>`` for each model feature, when the model cannot take NaN
       (``chain.model_takes_nan`` False: ``FittedChain.predict`` excludes a row with a NaN feature).

    Parameters
    ----------
    chain : FittedChain

    Returns
    -------
    tuple of str
    """
    reasons = [rule.reason for rule in chain.rules]
    reasons += [f"{prefix}:{step.name}" for step, prefix in chain.scoring_steps() if prefix is not None]
    reasons += [f"invalid:{column}" for column in chain.input_columns]
    if not chain.model_takes_nan:
        reasons += [f"invalid:{feature}" for feature in chain.feature_columns]
    return tuple(dict.fromkeys(reasons))


def code_tables(chain: FittedChain | ModelSet) -> dict[str, tuple[str, ...]]:
    """Output column -> its code table: ``scoring_status`` (:data:`STATUSES`), ``exclusion_reason``
    (:func:`reason_table`) and, for text classes, ``prediction`` (``chain.classes`` as str, the
    text ``FittedChain.predict`` gives them).

    For a model set: every component's reasons as the set gives them
    (:func:`lakescore.model_set.component_reason`, declared order), then ``invalid:<column>`` for
    the set's input columns; and ``<component>_prediction`` for each component of text classes."""
    if isinstance(chain, PastingEnsemble):  # a single chain's columns; every member's reasons, as they are
        tables = code_tables(chain.first)
        tables["exclusion_reason"] = tuple(dict.fromkeys(r for _, c in chain.components for r in reason_table(c)))
        return tables
    if isinstance(chain, ModelSet):
        reasons = [component_reason(name, r) for name, c in chain.components for r in reason_table(c)]
        reasons += [f"invalid:{column}" for column in chain.input_columns]
        tables = {"scoring_status": STATUSES, "exclusion_reason": tuple(dict.fromkeys(reasons))}
        for name, component in chain.components:
            tables.update({f"{name}_{column}": table for column, table in code_tables(component).items()
                           if column == "prediction"})
        return tables
    tables = {"scoring_status": STATUSES, "exclusion_reason": reason_table(chain)}
    if chain.task == "classification" and chain.label_dtype == "string":
        tables["prediction"] = tuple(dict.fromkeys(str(c) for c in chain.classes or ()))
    return tables


def saved_code_tables(model_path: str | Path) -> dict[str, tuple[str, ...]]:
    """:func:`code_tables` of the chain saved in a downloaded lakescore model folder (the one the
    Spark route hands ``spark_udf``): the driver's side of the tables the workers encode with."""
    from mlflow.models import Model  # only on the Spark route's driver

    folder = Path(model_path)
    artifacts = Model.load(str(folder)).flavors["python_function"]["artifacts"]
    return code_tables(load_saved(folder / artifacts["chain"]["path"]))


def encode(scored: pd.DataFrame, tables: dict[str, tuple[str, ...]]) -> pd.DataFrame:
    """Replace each column of ``scored`` that has a table by its codes (nullable Int64).

    Parameters
    ----------
    scored : DataFrame of shape (n_rows, n_outputs)
        ``FittedChain.predict`` (or the pyfunc's) output, string columns for the tabled ones.
    tables : dict of str to tuple of str
        :func:`code_tables`; a column not in ``scored`` is skipped.

    Returns
    -------
    DataFrame of shape (n_rows, n_outputs), same index and column order: a tabled column holds
    the position of its value in the table, ``<NA>`` where the value is null.

    Raises
    ------
    TransportCodeError
        A non-null value is not in its column's table (the message names the column and value).
    """
    out = scored.copy(deep=False)
    for name, table in tables.items():
        if name not in out.columns:
            continue
        column = out[name]
        # each distinct value looked up once: the table may hold hundreds of reasons, and a
        # Categorical of them costs 3.3 ms per 10,000 rows against 0.7 ms for this
        found, distinct = pd.factorize(column)  # -1: a null
        codes = np.append(pd.Index(list(table)).get_indexer(distinct), -1).astype("int64")[found]
        missing = found < 0
        unknown = (codes < 0) & ~missing
        if unknown.any():
            value = column[unknown].iloc[0]
            raise TransportCodeError(
                f"{name} value {value!r} is not in this chain's code table for the Spark route "
                f"({len(table)} values: {', '.join(table[:8])}{', ...' if len(table) > 8 else ''}); it cannot "
                "cross the UDF as a code. Add the place that produces it to "
                "lakescore.transport_codes.reason_table (or score with batch_compute: single_node meanwhile).",
                column=name, value=str(value))
        out[name] = pd.arrays.IntegerArray(np.where(missing, 0, codes), missing)
    return out


def decode_sql(code: str, table: tuple[str, ...]) -> str:
    """The Spark SQL text of the text that ``code`` (SQL text of a bigint column of :func:`encode`'s
    codes) stands for: ``element_at(array(<table as literals>), CAST(code AS INT) + 1)``.

    The literal array is one SQL text (:func:`lakescore.runtime.sql_text.sql_literal` per value),
    parsed once: a column built literal by literal costs a round trip to the JVM per value
    (0.07 s for a table of 141 reasons).

    Parameters
    ----------
    code : str
        SQL text of the codes (a quoted column name, a struct field); a row whose value is null
        (by its mask) is not read.
    table : tuple of str
        The column's code table (:func:`code_tables`).

    Returns
    -------
    str
        SQL text of a string column (``CAST(NULL AS STRING)`` for an empty table).
    """
    from lakescore.runtime.sql_text import sql_literal

    if not table:
        return "CAST(NULL AS STRING)"
    return f"element_at(array({', '.join(map(sql_literal, table))}), CAST({code} AS INT) + 1)"
