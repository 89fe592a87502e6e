"""The logged model's code, by MLflow's models-from-code: the artifact holds this file, not a
cloudpickled object, so loading a lakescore model unpickles no Python object of ours.

MLflow runs this file when the model is loaded; :class:`lakescore.packaging.LakescoreModel`
then loads the saved chain and re-verifies its certificate in ``load_context``.
"""

import mlflow

from lakescore.packaging import LakescoreModel

mlflow.models.set_model(LakescoreModel())
