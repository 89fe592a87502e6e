"""Built-in preprocessing steps: ``learn(frame, y, params) -> state``, ``apply(frame, state) -> frame``.

One module per family. Importing this package registers every built-in step by its config name.
User steps (``step: custom``) are registered by :mod:`lakescore.custom`.
"""

from lakescore.steps import (  # noqa: F401  (registration)
    arithmetic,
    binning,
    casting,
    cleaning,
    derived,
    encoders,
    geography,
    hashing,
    imputers,
    model_imputers,
    outliers,
    power,
    rows,
    scalers,
    selection,
    text,
    transforms,
)
from lakescore.steps.base import STEPS, FittedStep, StepKind, learn_step, parse_params, step_kind

__all__ = ["STEPS", "FittedStep", "StepKind", "learn_step", "parse_params", "step_kind"]
