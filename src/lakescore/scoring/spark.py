"""The Spark route: ``mlflow.pyfunc.spark_udf`` over the pinned snapshot, in admitted batches.

Each worker loads the pyfunc (whose ``load_context`` re-verifies the certificate) and slices every
Arrow batch it receives into model calls of at most ``spark_udf_prediction_batch_rows`` rows. The
UDF returns a struct; missing strings travel as :data:`lakescore.frames.NULL_SENTINEL` and are
turned back into SQL nulls here, so an ``exclusion_reason`` arrives as null, never "None"/"<NA>".
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import pandas as pd

from lakescore.frames import NULL_SENTINEL
from lakescore.scoring.preflight import ScorePlan


def _result_type(output: Any) -> tuple[str, dict[str, str]]:
    """Struct DDL for the UDF, and the final Spark type of each field."""
    final = {}
    for spec in output.inputs:
        kind = spec.type.name if hasattr(spec.type, "name") else str(spec.type)
        final[spec.name] = {"long": "bigint", "integer": "bigint", "double": "double",
                            "float": "double", "boolean": "boolean"}.get(kind, "string")
    transport = {n: ("double" if t in ("bigint", "double") else "string") for n, t in final.items()}
    return ", ".join(f"{n} {t}" for n, t in transport.items()), final


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


def score_spark(runtime: Any, plan: ScorePlan, *, batch_rows: int, env_manager: str) -> pd.DataFrame:
    """Score the source at ``plan.source_version`` on Spark workers.

    Returns
    -------
    DataFrame of shape (n_source_rows, n_keys + 4), sorted by the record keys, with nullable
    dtypes (Int64 labels, Float64 probabilities, string status and reason).
    """
    import mlflow  # heavy: only on the scoring path
    from mlflow.models import get_model_info
    from pyspark.sql import functions as F

    spark = runtime.spark()
    source = runtime.spark_source(plan.source_table, version=plan.source_version)
    source = source.repartition(spark.sparkContext.defaultParallelism)  # every core gets batches
    ddl, final = _result_type(get_model_info(plan.model_uri).signature.outputs)
    with _env_notice_answered(env_manager):
        udf = mlflow.pyfunc.spark_udf(spark, plan.model_uri, result_type=ddl, env_manager=env_manager,
                                      params={"batch_rows": batch_rows, "null_transport": True})
    scored = source.select(*plan.record_keys, udf(F.struct(*plan.input_columns)).alias("_r"))
    fields = []
    for name, kind in final.items():
        value = F.col(f"_r.{name}")
        if kind in ("bigint", "double"):
            value = F.when(F.isnan(value), F.lit(None)).otherwise(value).cast(kind)
        else:  # strings and booleans travel as text; "True"/"False" cast back to boolean
            value = F.when(value == F.lit(NULL_SENTINEL), F.lit(None)).otherwise(value).cast(kind)
        fields.append(value.alias(name))
    table = scored.select(*plan.record_keys, *fields).toArrow()
    return _to_pandas(table).sort_values(list(plan.record_keys), ignore_index=True)


def _to_pandas(table: Any) -> pd.DataFrame:
    import pyarrow as pa

    mapping = {pa.int64(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(), pa.string(): pd.StringDtype(),
               pa.large_string(): pd.StringDtype(), pa.bool_(): pd.BooleanDtype()}
    return table.to_pandas(types_mapper=mapping.get)
