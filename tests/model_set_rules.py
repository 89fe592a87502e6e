"""Combined rules of the test model sets (``conftest.small_set``), importable by name in a fresh process."""

import pandas as pd


def late_flag(frame: pd.DataFrame, params: dict) -> pd.Series:
    """Late when the delay model's probability or the minutes model's minutes say so (the row's own values)."""
    late = (frame["delay_model_probability"].astype("float64") >= params["p"]) | \
        (frame["minutes_model_prediction"].astype("float64") >= params["minutes"])
    return pd.Series(late.to_numpy(), index=frame.index, dtype="boolean")


def above_batch_mean(frame: pd.DataFrame, params: dict) -> pd.Series:
    """Batch-dependent on purpose: compares each row with the mean of its batch."""
    minutes = frame["minutes_model_prediction"].astype("float64")
    return pd.Series((minutes > minutes.mean()).to_numpy(), index=frame.index, dtype="boolean")
