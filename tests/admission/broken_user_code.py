"""Deliberately broken (and deliberately fine) user step functions for the lint tests.
Line numbers matter: the tests assert them."""

import os

SEEN = {}


def fill_values(df, state):
    df["x"] = df["x"].fillna(df["x"].mean())
    return df


def reads_index(df, state):
    df["row"] = df.index
    return df


def writes_global(df, state):
    global SEEN
    SEEN = {"rows": 1}
    return df


def sorts(df, state):
    return df.sort_values("x")


def counts_rows(df, state):
    df["n"] = len(df)
    return df


def sets_environment(df, state):
    os.environ["LAKESCORE_SEEN"] = "1"
    return df


def remembers(df, state, cache=[]):
    cache.append(len(df.columns))
    return df


def tags_itself(df, state):
    tags_itself.calls = 1
    return df


def uses_globals(df, state):
    globals()["last"] = df
    return df


def _centre(frame):
    return frame["x"] - frame["x"].median()


def calls_a_helper(df, state):
    df["x"] = _centre(df)
    return df


def row_wise(df, state):
    if len(df) == 0 or df.shape[0] == 0:
        return df
    if df["x"].isna().all():
        raise ValueError("x is missing everywhere")
    df["total"] = df[["x", "y"]].sum(axis=1)
    df["biggest"] = df[["x", "y"]].max(1)
    df["code"] = df["name"].str.upper().str.len()
    df["day"] = df["when"].dt.day
    df["width"] = df.shape[1]
    df["any_missing"] = df[["x", "y"]].isna().any(axis=1)
    return df


def batch_centred(frame):
    return frame["dep_delay"] - frame["dep_delay"].mean()


def forward_fill(frame):
    return frame["dep_delay"].ffill()


CACHE = {}
SEEN_ROWS = []


def codes_by_first_seen(df, state):
    codes = CACHE.setdefault("carrier", {})
    df["code"] = df["carrier"].map(lambda c: codes.setdefault(c, len(codes)))
    return df


def logs_widths(df, state):
    SEEN_ROWS.append(df.shape[1])
    return df


def fills_a_module_dict(df, state):
    CACHE["width"] = df.shape[1]
    return df


def lower_carrier(frame):
    return frame["carrier"].str.lower()


from lakescore.custom import column_step  # noqa: E402  (kept last: the line numbers above are asserted)

batch_centred_step = column_step("batch_centred", batch_centred, output=["dep_delay"])
forward_fill_step = column_step("forward_fill", forward_fill, output=["dep_delay"])
lower_carrier_step = column_step("carrier_lc", lower_carrier, output=["carrier_lc"])
