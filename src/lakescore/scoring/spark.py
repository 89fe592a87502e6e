"""The Spark route: ``mlflow.pyfunc.spark_udf`` over a Spark DataFrame of the rows to score, in admitted batches.

Each worker loads the pyfunc (whose ``load_context`` re-verifies the certificate) and slices every
Arrow batch it receives into model calls of at most ``spark_udf_prediction_batch_rows`` rows.

Transport, both ways exact. In: the inputs cross as a struct; an integer column reaches the worker
as nullable Int64 (``spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype``, set here for
the session), never as float64, so 2**53 + 1 stays 2**53 + 1 and a null stays a null. Spark 4.1
(Databricks Runtime 18 LTS) has no such setting and hands a bigint column with a null in the batch
over as float64, so there bigint inputs cross as ``decimal(19,0)`` (:func:`exact_inputs`), which
:func:`lakescore.conform.conform_inputs` reads back as exact Int64. Out: the UDF
returns each output in its own Spark type (bigint, double, boolean, string) with no value missing,
plus one boolean null-mask field per output (:func:`lakescore.frames.to_transport`); the mask turns
the value back into a SQL null here. No text or number is reserved to mean null. Text outputs
(``scoring_status``, ``exclusion_reason``, text-class ``prediction``) cross as bigint codes into
tables the chain determines and are decoded here with a literal array
(:mod:`lakescore.transport_codes`), so MLflow converts no string of them row by row.

No shuffle: the UDF runs on the source's own file splits (:mod:`lakescore.scoring.splits`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lakescore.config import EnvManager
from lakescore.frames import TRANSPORT_TYPES, null_mask_name
from lakescore.rules import OUTPUT_TYPES
from lakescore.runtime.sql_text import quoted_name, sql_literal
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.splits import spread_reads
from lakescore.scoring.tally import Tally
from lakescore.scoring.udf_model import local_model
from lakescore.transport_codes import decode_sql, saved_code_tables

INT_EXTENSION_CONF = "spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype"


def result_fields(output: Any) -> dict[str, str]:
    """Output column -> Spark type (bigint, double, boolean, string), from the signature outputs."""
    return {spec.name: TRANSPORT_TYPES[OUTPUT_TYPES.get(getattr(spec.type, "name", ""), "string")]
            for spec in output.inputs}


def transport_ddl(fields: dict[str, str]) -> str:
    """Struct DDL of the UDF result: each field in its own type, then its boolean null mask."""
    return ", ".join(f"{name} {kind}, {null_mask_name(name)} boolean" for name, kind in fields.items())


def has_int_extension(spark: Any) -> bool:
    """Whether ``spark`` (Spark 4.2 or later) has :data:`INT_EXTENSION_CONF`, which hands a pandas
    UDF its bigint inputs as nullable Int64."""
    major, minor = (int(part) for part in spark.version.split(".")[:2])
    return (major, minor) >= (4, 2)


def exact_inputs(source: Any, columns: tuple[str, ...] | list[str]) -> list[str]:
    """The UDF's input columns as Spark SQL texts, each one crossing to the worker exactly.

    Parameters
    ----------
    source : pyspark.sql.DataFrame
        The rows to score; its session's ``version`` decides.
    columns : sequence of str
        The model's input columns.

    Returns
    -------
    list of str
        Each column's quoted name (:func:`lakescore.runtime.sql_text.quoted_name`) on Spark 4.2 and
        later; on earlier Spark (4.1, Databricks Runtime 18 LTS) each bigint column cast to
        ``decimal(19,0)`` (every int64 fits in 19 digits) under its own name, since a pandas UDF
        there gets a bigint column with a null as float64, which rounds integers beyond 2**53.
        For ``selectExpr``, or inside ``struct(...)`` (one round trip to the JVM for them all).
    """
    from pyspark.sql.types import LongType

    if has_int_extension(source.sparkSession):
        return [quoted_name(name) for name in columns]
    longs = {field.name for field in source.schema.fields if isinstance(field.dataType, LongType)}
    return [f"CAST({quoted_name(name)} AS decimal(19,0)) AS {quoted_name(name)}" if name in longs else quoted_name(name)
            for name in columns]


ENV_NOTE = ("lakescore: env_manager=local: the workers score in this Python environment; each one "
            "re-checks the certificate's sealed Python and library versions before it scores a row.")


@contextmanager
def _env_notice_answered(env_manager: EnvManager) -> Iterator[None]:
    """With ``env_manager="local"``, replace MLflow's warning that the environment may differ from
    training's by one line saying which check answers it (the certificate's version pins)."""
    if env_manager != "local":
        yield
        return
    drop = logging.Filter()
    drop.filter = lambda record: 'env_manager="local"' not in record.getMessage()  # type: ignore[method-assign]
    logger = logging.getLogger("mlflow.pyfunc")
    logger.addFilter(drop)
    try:
        print(ENV_NOTE, file=sys.stderr, flush=True)
        yield
    finally:
        logger.removeFilter(drop)


def score_spark(source: Any, plan: ScorePlan, *, batch_rows: int, env_manager: EnvManager,
                model_dir: Path | None = None, carry: tuple[str, ...] = (),
                batch_scorer: Callable[..., Any] | None = None) -> Any:
    """Score ``source`` (the pinned snapshot, or a window's inserted rows) on Spark workers, lazily.

    Nothing runs here: the UDF runs when the returned frame is computed (the score workflow writes
    it once, into the run store, from the executors). No row reaches the driver, and no row is
    shuffled: the UDF runs in the source's own file splits, cut per core
    (:func:`lakescore.scoring.splits.spread_reads`).

    Parameters
    ----------
    source : pyspark.sql.DataFrame
        The rows to score, with ``plan.record_keys``, ``plan.input_columns`` and ``carry``; its
        session runs the UDF.
    plan : ScorePlan
        The model (``model_uri``), keys and input columns.
    batch_rows : int
        Most rows per model call on a worker (``spark_udf_prediction_batch_rows``).
    env_manager : {"local", "virtualenv"}
        ``spark_udf``'s ``env_manager`` (``local``: the workers use this Python environment).
    model_dir : Path, optional
        Where the driver downloads the model once for the workers (the run store's ``models``
        folder); default as :func:`lakescore.scoring.udf_model.local_model`.
    carry : tuple of str, default ()
        Source columns passed through after the outputs (the period column), so that nothing
        joins the source back to the predictions.
    batch_scorer : callable, optional
        What applies the model instead of this function's own ``spark_udf``: called as
        ``batch_scorer(source, result_type=<struct DDL>, params=<the UDF params>)`` and returning
        ``plan.record_keys``, the UDF's struct as ``_r``, then ``carry`` (Feature Engineering's
        ``score_batch`` on Databricks, which joins the model's lookups itself). The result is
        decoded the same way.

    Returns
    -------
    pyspark.sql.DataFrame of shape (n_source_rows, n_keys + n_outputs + len(carry))
        The record keys, then each output in its own Spark type (bigint, double, boolean,
        string), a SQL null where the UDF's null mask says so, then ``carry``; in no particular
        row order.
    """
    import mlflow  # heavy: only on the scoring path
    from mlflow.models import Model
    from pyspark.sql import functions as F

    spark = source.sparkSession
    if has_int_extension(spark):  # Spark 4.1 has no such conf (and serverless refuses unknown ones)
        spark.conf.set(INT_EXTENSION_CONF, "true")  # integer inputs reach the worker as Int64, not float64
    spread_reads(spark)
    model_path = local_model(plan.model_uri, model_dir)  # workers never open the registry (Spark Connect)
    fields = result_fields(Model.load(model_path).signature.outputs)  # the pyfunc's own (also inside an FE model)
    tables = saved_code_tables(model_path)
    wire = {name: "bigint" if name in tables else kind for name, kind in fields.items()}
    params = {"batch_rows": batch_rows, "null_transport": True}
    if batch_scorer is not None:
        scored = batch_scorer(source, result_type=transport_ddl(wire), params=params)
    else:
        with _env_notice_answered(env_manager):
            udf = mlflow.pyfunc.spark_udf(spark, model_path, result_type=transport_ddl(wire), env_manager=env_manager,
                                          params=params)
        inputs = F.expr(f"struct({', '.join(exact_inputs(source, plan.input_columns))})")
        scored = source.select(*plan.record_keys, udf(inputs).alias("_r"), *carry)
    # one SQL text for every output (a column built call by call takes a round trip to the JVM per
    # function and name: some 130 for the bench model's inputs and outputs)
    columns = []
    for name in fields:
        value = f"`_r`.{quoted_name(name)}"
        columns.append(f"CASE WHEN `_r`.{quoted_name(null_mask_name(name))} THEN NULL ELSE "
                       f"{decode_sql(value, tables[name]) if name in tables else value} END AS {quoted_name(name)}")
    return scored.selectExpr(*map(quoted_name, plan.record_keys), *columns, *map(quoted_name, carry))


def spark_tally(predictions: Any) -> Tally:
    """The :class:`~lakescore.scoring.tally.Tally` of a Spark DataFrame of predictions: one
    ``groupBy(scoring_status, exclusion_reason).count()`` on the executors; only the groups (a
    handful of rows) reach the driver."""
    rows = predictions.groupBy("scoring_status", "exclusion_reason").count().collect()
    return Tally.of((r["scoring_status"], r["exclusion_reason"], r["count"]) for r in rows)


def observe_tally(predictions: Any, tables: dict[str, tuple[str, ...]]) -> tuple[Any, Callable[[], Tally | None]]:
    """``predictions`` with their tally observed (``DataFrame.observe``, classic and Spark Connect):
    the action that computes them (the one pass's commit) counts the rows per
    ``(scoring_status, exclusion_reason)`` on the way, with no pass of its own.

    An observation holds aggregate expressions, not a ``groupBy``, so the groups are enumerated:
    every status of the code table of ``scoring_status`` with every reason the chain can give
    (the code table of ``exclusion_reason``, :mod:`lakescore.transport_codes`) or none. Each row's
    group is one number, ``status position * (reasons + 1) + reason position`` (0: no reason), and
    the rows are counted per number by one aggregate, Spark's ``histogram_numeric`` with as many
    bins as there are groups. Its bins are merged only beyond that many distinct values (closest
    centres first, so equal ones meet at distance 0): with at most one value per group, each bin
    is one group and its height that group's rows. One aggregate per group instead (``count_if``)
    costs each row every group: 2.1 s of a 336,776-row pass at 302 groups, against 0.3-0.7 s.

    Parameters
    ----------
    predictions : pyspark.sql.DataFrame
        The decoded predictions (:func:`score_spark`), lazily.
    tables : dict of str to tuple of str
        The model's code tables (:func:`lakescore.transport_codes.saved_code_tables`).

    Returns
    -------
    (pyspark.sql.DataFrame, callable)
        The observed frame, and a function to call once an action on it has finished: the
        :class:`~lakescore.scoring.tally.Tally`, or None when the groups do not add up to the
        rows counted (a status or reason outside the tables has no group number: count them with
        :func:`spark_tally`).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from lakescore.transport_codes import STATUSES

    statuses, reasons = tuple(tables.get("scoring_status", STATUSES)), tuple(tables.get("exclusion_reason", ()))
    width = len(reasons) + 1
    pairs = [(status, reason) for status in statuses for reason in (None, *reasons)]  # pairs[group number]
    # positions from 1 (array_position's 0, not found, becomes null: no group); one SQL text, as a
    # Column built call by call costs ~20 round trips to the JVM per literal
    status = f"nullif(array_position(array({', '.join(map(sql_literal, statuses))}), `scoring_status`), 0)"
    reason = ("CASE WHEN `exclusion_reason` IS NULL THEN 0 ELSE "
              + (f"nullif(array_position(array({', '.join(map(sql_literal, reasons))}), `exclusion_reason`), 0)"
                 if reasons else "NULL") + " END")
    group = f"(({status}) - 1) * {width} + ({reason})"
    observation = Observation()
    observed = predictions.observe(observation, F.expr("count(1) AS `_rows`"),
                                   F.expr(f"histogram_numeric({group}, {max(len(pairs), 1)}) AS `_groups`"))

    def tally() -> Tally | None:
        found = observation.get
        counts: dict[int, int] = {}
        for bin_ in found["_groups"] or ():  # a partition's bins: the same group may come once per partition
            number, rows = float(bin_["x"]), float(bin_["y"])
            if not number.is_integer() or not 0 <= number < len(pairs) or not rows.is_integer():
                return None  # not one group per bin: never with one bin per group, but not trusted
            counts[int(number)] = counts.get(int(number), 0) + int(rows)
        groups = [(*pairs[number], n) for number, n in sorted(counts.items())]
        return Tally.of(groups) if sum(n for *_, n in groups) == int(found["_rows"]) else None

    return observed, tally


def with_model_columns(scored: Any, source: Any | None, *, keys: list[str], period_column: str | None,
                       model_name: str, model_version: int) -> Any:
    """The Spark twin of the score workflow's last step: ``period_column`` joined from ``source`` on
    the keys (when given and not already there), then constant ``model_name`` (string) and
    ``model_version`` (bigint) columns. Lazy, like ``scored``.

    Parameters
    ----------
    scored : pyspark.sql.DataFrame
        The predictions (:func:`score_spark`).
    source : pyspark.sql.DataFrame or None
        The rows scored, with ``keys`` and ``period_column`` (one row per key).
    """
    from pyspark.sql import functions as F

    if period_column and source is not None and period_column not in scored.columns:
        scored = scored.join(source.select(*keys, period_column), on=keys, how="left")
    return (scored.withColumn("model_name", F.lit(model_name).cast("string"))
            .withColumn("model_version", F.lit(int(model_version)).cast("bigint")))
