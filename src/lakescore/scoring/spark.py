"""The Spark route: ``mlflow.pyfunc.spark_udf`` over a Spark DataFrame of the rows to score, in admitted batches.

Each worker loads the pyfunc (whose ``load_context`` re-verifies the certificate) and slices every
Arrow batch it receives into model calls of at most ``spark_udf_prediction_batch_rows`` rows.

Transport, both ways exact. In: the inputs cross as a struct; an integer column reaches the worker
as nullable Int64 (``spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype``, set here for
the session), never as float64, so 2**53 + 1 stays 2**53 + 1 and a null stays a null. Out: the UDF
returns each output in its own Spark type (bigint, double, boolean, string) with no value missing,
plus one boolean null-mask field per output (:func:`lakescore.frames.to_transport`); the mask turns
the value back into a SQL null here. No text or number is reserved to mean null.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from lakescore.frames import TRANSPORT_TYPES, null_mask_name
from lakescore.rules import OUTPUT_TYPES
from lakescore.scoring.preflight import ScorePlan
from lakescore.scoring.udf_model import default_parallelism, local_model

INT_EXTENSION_CONF = "spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype"


def result_fields(output: Any) -> dict[str, str]:
    """Output column -> Spark type (bigint, double, boolean, string), from the signature outputs."""
    return {spec.name: TRANSPORT_TYPES[OUTPUT_TYPES.get(getattr(spec.type, "name", ""), "string")]
            for spec in output.inputs}


def transport_ddl(fields: dict[str, str]) -> str:
    """Struct DDL of the UDF result: each field in its own type, then its boolean null mask."""
    return ", ".join(f"{name} {kind}, {null_mask_name(name)} boolean" for name, kind in fields.items())


ENV_NOTE = ("lakescore: env_manager=local: the workers score in this Python environment; each one "
            "re-checks the certificate's sealed Python and library versions before it scores a row.")


@contextmanager
def _env_notice_answered(env_manager: str) -> Iterator[None]:
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


def score_spark(source: Any, plan: ScorePlan, *, batch_rows: int, env_manager: str,
                model_dir: Path | None = None) -> pd.DataFrame:
    """Score ``source`` (the pinned snapshot, or a window's inserted rows) on Spark workers.

    Parameters
    ----------
    source : pyspark.sql.DataFrame
        The rows to score, with ``plan.record_keys`` and ``plan.input_columns``; its session
        runs the UDF.
    plan : ScorePlan
        The model (``model_uri``), keys and input columns.
    batch_rows : int
        Most rows per model call on a worker (``spark_udf_prediction_batch_rows``).
    env_manager : str
        ``spark_udf``'s ``env_manager`` (``local``: the workers use this Python environment).
    model_dir : Path, optional
        Where the driver downloads the model once for the workers (the run store's ``models``
        folder); default as :func:`lakescore.scoring.udf_model.local_model`.

    Returns
    -------
    DataFrame of shape (n_source_rows, n_keys + n_outputs), sorted by the record keys, with nullable
    dtypes (Int64 integers, Float64 probabilities, string status and reason, boolean).
    """
    import mlflow  # heavy: only on the scoring path
    from mlflow.models import get_model_info
    from pyspark.sql import functions as F

    spark = source.sparkSession
    spark.conf.set(INT_EXTENSION_CONF, "true")  # integer inputs reach the worker as Int64, not float64
    source = source.repartition(default_parallelism(spark))  # every core gets batches
    fields = result_fields(get_model_info(plan.model_uri).signature.outputs)
    model_path = local_model(plan.model_uri, model_dir)  # workers never open the registry (Spark Connect)
    with _env_notice_answered(env_manager):
        udf = mlflow.pyfunc.spark_udf(spark, model_path, result_type=transport_ddl(fields),
                                      env_manager=env_manager, params={"batch_rows": batch_rows, "null_transport": True})
    scored = source.select(*plan.record_keys, udf(F.struct(*plan.input_columns)).alias("_r"))
    columns = [F.when(F.col(f"_r.{null_mask_name(name)}"), F.lit(None).cast(kind))
               .otherwise(F.col(f"_r.{name}")).alias(name) for name, kind in fields.items()]
    table = scored.select(*plan.record_keys, *columns).toArrow()
    return _to_pandas(table).sort_values(list(plan.record_keys), ignore_index=True)


def _to_pandas(table: Any) -> pd.DataFrame:
    import pyarrow as pa

    mapping = {pa.int64(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(), pa.string(): pd.StringDtype(),
               pa.large_string(): pd.StringDtype(), pa.bool_(): pd.BooleanDtype()}
    return table.to_pandas(types_mapper=mapping.get)
