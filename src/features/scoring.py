"""Scoring rules of the flights project, named in config/scoring.yml.

An eligibility rule gets a copy of its declared columns and returns one boolean per row
(True = the row may be scored). It must be row-local: look at each row's own values only.
"""

import pandas as pd


def has_departed(frame: pd.DataFrame, params: dict) -> pd.Series:
    """A flight with no departure time was cancelled: there is no arrival to predict."""
    return frame["dep_time"].notna()
