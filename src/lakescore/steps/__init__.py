"""Built-in preprocessing steps: ``learn(frame, y, params) -> state``, ``apply(frame, state) -> frame``.

One module per family. Importing this package registers every built-in step by its config name.
"""

from lakescore.steps import encoders, imputers, outliers, scalers  # noqa: F401  (registration)
from lakescore.steps.base import STEPS, FittedStep, StepKind, learn_step, parse_params, step_kind

__all__ = ["STEPS", "FittedStep", "StepKind", "learn_step", "parse_params", "step_kind"]
