"""The single-node route: the whole pinned snapshot as one pandas frame through the pyfunc."""

from __future__ import annotations

from typing import Any

import pandas as pd

from lakescore.scoring.preflight import ScorePlan


def score_single_node(runtime: Any, plan: ScorePlan, *, batch_rows: int) -> pd.DataFrame:
    """Score the source at ``plan.source_version`` in this process.

    Returns
    -------
    DataFrame of shape (n_source_rows, n_keys + 4): record keys then ``FittedChain.predict``'s
    columns, sorted by the keys.
    """
    import mlflow  # heavy: only on the scoring path

    source = runtime.read_table(plan.source_table, version=plan.source_version,
                                columns=list(dict.fromkeys([*plan.record_keys, *plan.input_columns])))
    model = mlflow.pyfunc.load_model(plan.model_uri)
    scored = model.predict(source[list(plan.input_columns)], params={"batch_rows": batch_rows})
    out = pd.concat([source[list(plan.record_keys)].reset_index(drop=True), scored.reset_index(drop=True)], axis=1)
    return out.sort_values(list(plan.record_keys), ignore_index=True)
