"""A broken combined rule for the admission tests, importable by name in a fresh process (the good one,
``late_flag``, is the project's: ``lakescore_project.scoring``)."""

import pandas as pd


def above_batch_mean(frame: pd.DataFrame, params: dict) -> pd.Series:
    """Batch-dependent on purpose: compares each row with the mean of its batch."""
    minutes = frame["minutes_model_prediction"].astype("float64")
    return pd.Series((minutes > minutes.mean()).to_numpy(), index=frame.index, dtype="boolean")
