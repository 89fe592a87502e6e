"""Spark SQL text built from values and schemas: a literal reads back as the value, a table made
from a schema's DDL has that schema."""

import pytest

from lakescore.runtime.sql_text import quoted_name, schema_ddl, sql_literal


def test_names_are_quoted_with_backticks_doubled():
    assert quoted_name("probability") == "`probability`"
    assert quoted_name("p(late) `x`") == "`p(late) ``x```"


@pytest.mark.spark
def test_a_literal_reads_back_as_written(spark):
    values = ["it's", "a \\ path", "${x}", "$", "déjà vu", "-- not a comment", ""]
    got = spark.sql("SELECT " + ", ".join(f"{sql_literal(v)} AS c{i}" for i, v in enumerate(values))).first()
    assert list(got) == values


@pytest.mark.spark
def test_a_table_created_from_a_schemas_ddl_has_that_schema(spark, tmp_path):
    from pyspark.sql import types as T  # noqa: N812

    schema = T.StructType([
        T.StructField("flight_id", T.LongType(), nullable=False),
        T.StructField("p`late", T.DoubleType()),  # Delta refuses spaces and brackets, not a backtick
        T.StructField("scoring_status", T.StringType()),
        T.StructField("time_hour", T.TimestampType()),
        T.StructField("day", T.DateType()),
        T.StructField("amount", T.DecimalType(19, 0)),
        T.StructField("ok", T.BooleanType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("scores", T.MapType(T.StringType(), T.DoubleType())),
        T.StructField("where", T.StructType([T.StructField("lat-lon", T.DoubleType()), T.StructField("n", T.IntegerType())])),
    ])
    table = f"delta.`{tmp_path / 't'}`"
    spark.sql(f"CREATE TABLE {table} ({schema_ddl(schema)}) USING DELTA")
    assert spark.read.format("delta").load(str(tmp_path / "t")).schema == schema
