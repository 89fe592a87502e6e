"""Scoring rules of the flights project, named in config/scoring.yml.

An eligibility rule gets a copy of its declared columns and returns one boolean per row
(True = the row may be scored). It must be row-local: look at each row's own values only.
"""

import numpy as np
import pandas as pd


def has_departed(frame: pd.DataFrame, params: dict) -> pd.Series:
    """A flight with no departure time was cancelled: there is no arrival to predict."""
    return frame["dep_time"].notna()


def risk_band(frame: pd.DataFrame, params: dict) -> pd.Series:
    """Output rule: 'high' / 'medium' / 'low' from the probability of a late arrival, using the
    thresholds in params (``high``, ``medium``). Reads only the row's own probability, as a numpy
    array (comparisons of arrays cost less than of Series: a one-row request pays for each Series)."""
    probability = frame["probability"].to_numpy(dtype="float64", na_value=np.nan)
    band = np.where(probability >= params["high"], "high",
                    np.where(probability >= params["medium"], "medium", "low"))
    return pd.Series(band, index=frame.index, dtype="string")


def late_flag(frame: pd.DataFrame, params: dict) -> pd.Series:
    """Combined rule of a model set (scoring.yml ``combined_rules``): late when the delay model's
    probability reaches ``params["p"]`` or the minutes model predicts at least ``params["minutes"]``
    minutes. Reads one row's own component predictions only."""
    late = (frame["delay_model_probability"].astype("float64") >= params["p"]) | \
        (frame["minutes_model_prediction"].astype("float64") >= params["minutes"])
    return pd.Series(late.to_numpy(), index=frame.index, dtype="boolean")
