"""What the preloaded fork server imports once, so replicas forked from it share these pages and
start without importing anything: pandas (with pyarrow), scikit-learn, MLflow's pyfunc and
lakescore's chain and replica. Not MLflow's SQL registry store (SQLAlchemy, ~45 MB): a replica loads its
version from the artifact location the endpoint read once
(:func:`lakescore.serving.plan.artifact_location`), so only the short-lived children that read
the registry import it, after their fork. Nothing here starts a Python thread (OpenBLAS keeps its
own idle pool, which is fork-safe); a replica still loads and verifies its model itself after the
fork, and so does a cold-path child.

Measured (one replica of the demo model, LogisticRegression; replica and fork server PSS in MB):
without ``gc.freeze`` 175 and 183 (the collector writes to every shared object, so each replica copies
them); with it 142 and 168; with ``malloc_trim`` after the imports too, 140 and 155; without the SQL
store, 108 and 111 (``scripts/bench_serving_memory.py``). Leaving out ``sklearn.ensemble`` and
``sklearn.compose`` saves about 2 MB per replica but makes a replica of a model that uses them import
them privately, so they stay. What is left is what a replica needs to load and score: scikit-learn
(with ``scipy.stats``, which ``sklearn.utils`` imports), pandas, and MLflow's pyfunc, which imports
polars and pyspark when they are installed (~30 MB of the shared pages).
"""

import gc
import warnings

with warnings.catch_warnings():  # import-time notices of third-party packages are not ours
    warnings.simplefilter("ignore")
    import mlflow.artifacts  # noqa: F401
    import mlflow.pyfunc  # noqa: F401
    import pandas  # noqa: F401
    import psutil  # noqa: F401
    import sklearn.compose  # noqa: F401
    import sklearn.ensemble  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.preprocessing  # noqa: F401

    import lakescore.admission.certificate  # noqa: F401
    import lakescore.chain  # noqa: F401
    import lakescore.models  # noqa: F401
    import lakescore.packaging  # noqa: F401
    import lakescore.serving.replicas.replica  # noqa: F401
    from lakescore.serving.replicas.replica import trim_memory

gc.collect()
gc.freeze()  # keep the collector from touching (and so copying) the shared objects in each replica
trim_memory()  # hand the heap pages the imports freed back to the OS, so no replica inherits them
