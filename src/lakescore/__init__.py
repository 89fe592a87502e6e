"""lakescore: admitted, certified batch and warm scoring of bounded ML pipelines on the lakehouse.

The import is deliberately light: heavy dependencies (pyspark, mlflow, deltalake) are imported
inside the functions that need them, so a Spark worker that only scores imports in milliseconds.
"""

__version__ = "0.1.0"
