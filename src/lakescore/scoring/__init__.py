"""Scoring routes: preflight, whole frame (single node), and Spark workers via spark_udf."""
