"""What the preloaded fork server imports once, so copies forked from it share these pages and
start without importing anything: pandas (with pyarrow), scikit-learn, MLflow's pyfunc and its
SQL registry store, and lakescore's chain and copy. Nothing here starts a thread, which is
what makes forking safe; a copy still loads and verifies its model itself after the fork.
"""

import gc
import warnings

with warnings.catch_warnings():  # import-time notices of third-party packages are not ours
    warnings.simplefilter("ignore")
    import pandas  # noqa: F401
    import sklearn.compose  # noqa: F401
    import sklearn.ensemble  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.preprocessing  # noqa: F401
    import mlflow.artifacts  # noqa: F401
    import mlflow.pyfunc  # noqa: F401
    import mlflow.store.model_registry.sqlalchemy_store  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import psutil  # noqa: F401

    import lakescore.admission.certificate  # noqa: F401
    import lakescore.chain  # noqa: F401
    import lakescore.models  # noqa: F401
    import lakescore.packaging  # noqa: F401
    import lakescore.serving.copy_app  # noqa: F401

gc.collect()
gc.freeze()  # keep the collector from touching (and so copying) the shared objects in each copy
