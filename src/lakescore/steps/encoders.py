"""Encoding steps: categories are learned at training and fixed in state as strings.

A value's category is its text (:func:`lakescore.steps.base.text_values`): ``1`` in an integer
column, ``1.0`` in a float column, the string itself in a text column. Every encoder writes float64
columns, and a value not seen at training gets a fixed, documented code, so a row is encoded the
same way in any batch.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from lakescore.columns import Columns, Kernel, text_or_missing, text_values
from lakescore.errors import StepError
from lakescore.steps.arrays import Positions
from lakescore.steps.base import StepKind, StepParams, register


def _present(frame: pd.DataFrame, column: str) -> np.ndarray:
    """Non-missing category texts of ``column`` as an (n, 1) object array for sklearn."""
    values = text_values(frame, column)
    return values[pd.notna(values)].astype(object).reshape(-1, 1)


class OneHotParams(StepParams):
    max_categories: None = None
    include_missing: Literal[False] = False
    column_names: Literal["slug", "raw"] = "slug"
    min_frequency: int = Field(default=1, ge=1)

    @field_validator("max_categories", mode="before")
    @classmethod
    def _no_cap(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("must be null: a capped category list depends on the training batch")
        return value

    @field_validator("include_missing", mode="before")
    @classmethod
    def _no_missing_column(cls, value: Any) -> Any:
        if value is not False:
            raise ValueError("must be false: a missing value gives all zeros, never its own column")
        return value


@functools.lru_cache(maxsize=256)
def _category_index(categories: tuple[str, ...]) -> pd.Index:
    """The fixed category list as a pandas Index, built (and hashed) once per list."""
    return pd.Index(categories, dtype=object)


def category_codes(values: np.ndarray, categories: list[str]) -> np.ndarray:
    """``pd.Categorical(values, categories=categories).codes`` (position in ``categories``; -1 for a
    value not in it, or missing), as integers: the lookup against an Index kept per category list,
    not a new categorical dtype validated on every call (which costs more than a one-row apply)."""
    index = _category_index(tuple(categories))
    if not index.is_unique:  # a list pd.Categorical refuses: let it say so
        return pd.Categorical(values, categories=categories).codes
    return index.get_indexer(values)


def slug(value: str) -> str:
    """A safe column-name fragment: runs of characters other than ``[0-9A-Za-z_]`` become ``_``.

    >>> slug("B6 / JetBlue")
    'B6_JetBlue'
    """
    return re.sub(r"[^0-9A-Za-z_]+", "_", value).strip("_") or "blank"


def refuse_unlisted(params: Any, setting: str, named: Any) -> None:
    """Refuse a per-column setting that names a column the step does not encode.

    Parameters
    ----------
    params : StepParams
        The step's settings: its ``name`` and ``columns``.
    setting : str
        How the message names the setting and its verb, e.g. ``"categories name"``.
    named : iterable of str
        The columns the setting names (the keys of its mapping).

    Raises
    ------
    StepError
        Naming the step, the columns not in ``columns`` (sorted) and the fix.
    """
    unknown = sorted(set(named) - set(params.columns))
    if unknown:
        raise StepError(f"step '{params.name}': {setting} column(s) {unknown} that are not in columns "
                        f"{params.columns}; add them to columns or remove them", step=params.name)


def _check_names(step: str, names: list[str], frame: pd.DataFrame, dropped: list[str]) -> None:
    seen: dict[str, int] = {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
    twice = sorted(n for n, k in seen.items() if k > 1)
    if twice:
        raise StepError(f"step '{step}': categories give the same column name(s) {twice}; use "
                        "column_names: raw, or repair the categories first (ValueReplacement)", step=step)
    clash = sorted(n for n in names if n in frame.columns and n not in dropped)
    if clash:
        raise StepError(f"step '{step}': new column(s) {clash} already exist in the frame; rename "
                        "the existing columns or encode another way", step=step)


@register
class OneHotEncoder(StepKind):
    """One 0/1 float64 column per learned category; an unseen or missing value gives all zeros.

    Categories are the training values as strings, learned by sklearn ``OneHotEncoder``; with
    ``min_frequency: k`` a category seen fewer than k times is infrequent and encodes like an
    unseen one. The source column is dropped. ``column_names: slug`` turns ``dest=LAX`` into
    ``dest_LAX``. ``max_categories`` must be null and ``include_missing`` false (both would make
    the columns depend on the training batch or on missing values).
    """

    kind = "OneHotEncoder"
    Params = OneHotParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import OneHotEncoder as Sk

        categories, names = [], []
        for column in params.columns:
            data = _present(frame, column)
            cats: list[str] = []
            if len(data):
                encoder = Sk(handle_unknown="infrequent_if_exist" if params.min_frequency > 1 else "ignore",
                             min_frequency=params.min_frequency).fit(data)
                rare = set(encoder.infrequent_categories_[0]) if params.min_frequency > 1 and \
                    encoder.infrequent_categories_[0] is not None else set()
                cats = [str(c) for c in encoder.categories_[0] if c not in rare]
            categories.append(cats)
            names.append([f"{column}_{slug(c) if params.column_names == 'slug' else c}" for c in cats])
        _check_names(params.name, [n for group in names for n in group], frame, list(params.columns))
        return {"categories": categories, "names": names}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        # each value is looked up in the fixed category list on its own (code -1: unseen or
        # missing -> all zeros), then one 1.0 is set per row: O(rows) instead of O(rows x categories)
        blocks = []
        for column, cats in zip(state["columns"], state["categories"]):
            codes = category_codes(text_values(frame, column), cats)
            block = np.zeros((len(frame), len(cats)), dtype="float64")
            known = np.flatnonzero(codes >= 0)
            block[known, codes[known]] = 1.0
            blocks.append(block)
        names = [n for group in state["names"] for n in group]
        matrix = np.hstack(blocks) if blocks else np.zeros((len(frame), 0))
        new = pd.DataFrame(matrix, index=frame.index, columns=names)
        return pd.concat([frame.drop(columns=state["columns"]), new], axis=1, copy=False)

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        # the category list becomes a lookup once; each value's code is its position (negative:
        # unseen or missing -> all zeros), the same codes pd.Categorical gives in apply
        groups = [(column, Positions(cats), names)
                  for column, cats, names in zip(state["columns"], state["categories"], state["names"])]

        def apply(batch: Columns) -> None:
            for column, categories, names in groups:
                codes = categories.of(_texts(batch, column))  # missing, however written: a negative code
                block = np.zeros((len(codes), len(names)), dtype="float64", order="F")
                known = np.flatnonzero(codes >= 0)
                block[known, codes[known]] = 1.0
                batch.set_block(names, block)
            batch.drop(state["columns"])

        return Kernel(apply)


def _lookup_kernel(columns: list[str], categories: list[list[str]], values: list[list[float]],
                   unknown: list[float], missing: list[float]) -> Kernel:
    """A kernel that replaces each column's category text by its value: the categories become
    :class:`Positions` once, with a float64 table ``[values..., missing, unknown]``; a text's
    position (-1: unseen, -2: missing) picks its entry."""
    lookups = [(column, Positions(cats), np.array([*vals, gap, unseen], dtype="float64"))
               for column, cats, vals, unseen, gap in zip(columns, categories, values, unknown, missing)]

    def apply(batch: Columns) -> None:
        for column, positions, table in lookups:
            batch.set(column, table[positions.of(_texts(batch, column))])

    return Kernel(apply)


def _texts(batch: Columns, column: str) -> np.ndarray:
    """The column's texts up to how missing values are written: an object column of strings as it
    is (its texts, with NaN or pd.NA where they give None), else ``batch.texts``."""
    values = text_or_missing(batch.array(column))
    return values if values is not None else batch.texts(column)


class OrdinalParams(StepParams):
    unknown_value: float = -1.0
    missing_value: float | None = None
    categories: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("categories")
    @classmethod
    def _unique(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for column, cats in value.items():
            if len(set(cats)) != len(cats):
                raise ValueError(f"categories of {column!r} repeat a value: {cats}")
        return value


@register
class OrdinalEncoder(StepKind):
    """Replace each category by its position (0.0, 1.0, ...) in the learned or given order.

    Learned order is sklearn ``OrdinalEncoder``'s (sorted text); ``categories: {col: [...]}`` fixes
    it instead. An unseen value becomes ``unknown_value`` (default -1.0), a missing one
    ``missing_value`` (default NaN, for a later imputer).
    """

    kind = "OrdinalEncoder"
    Params = OrdinalParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import OrdinalEncoder as Sk

        refuse_unlisted(params, "categories name", params.categories)
        categories = []
        for column in params.columns:
            if column in params.categories:
                categories.append(list(params.categories[column]))
                continue
            data = _present(frame, column)
            cats = Sk().fit(data).categories_[0] if len(data) else []
            categories.append([str(c) for c in cats])
        missing = np.nan if params.missing_value is None else params.missing_value
        return {"categories": categories, "unknown": params.unknown_value, "missing": missing}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, cats in zip(state["columns"], state["categories"]):
            codes = {c: float(i) for i, c in enumerate(cats)}
            values = text_values(frame, column)
            frame[column] = np.array([state["missing"] if v is None else codes.get(v, state["unknown"])
                                      for v in values], dtype="float64")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """Positions of ``state["categories"]`` looked up per text; ``unknown`` and ``missing`` otherwise."""
        n = len(state["columns"])
        return _lookup_kernel(state["columns"], state["categories"],
                              [list(range(len(cats))) for cats in state["categories"]],
                              [state["unknown"]] * n, [state["missing"]] * n)


class TargetParams(StepParams):
    smooth: Literal["auto"] | float = "auto"
    target_type: Literal["auto", "binary", "continuous"] = "auto"
    cv: int = Field(default=5, ge=2, le=20)
    shuffle: bool = True
    random_state: int = 0


def _target_inputs(frame: pd.DataFrame, y: pd.Series, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's input: the category texts (object, missing as NaN) of shape (n_rows, n_columns) and
    the label as float64 (numeric) or object (text) of shape (n_rows,)."""
    target = np.asarray(y.astype(object) if not pd.api.types.is_numeric_dtype(y.dtype) else y.astype("float64"))
    data = np.column_stack([text_values(frame, c) for c in columns]).reshape(len(frame), -1)
    return np.where(pd.isna(data), np.nan, data).astype(object), target


@register
class TargetEncoder(StepKind):
    """Replace each category by its smoothed target mean (sklearn ``TargetEncoder``'s encodings).

    A missing value is its own category when the training rows had one; an unseen category (or an
    unseen missing value) gets the overall target mean. Binary and continuous targets only.

    Training rows are cross-fitted as sklearn's ``fit_transform`` does: the rows are split into
    ``cv`` folds (``StratifiedKFold`` for a binary label, ``KFold`` otherwise; ``shuffle`` with
    ``random_state``) and each row gets the encoding learned on the other folds, so the model
    never sees a row's own label inside its feature. The encodings saved in state, which every
    scoring row gets, are learned on all training rows.
    """

    kind = "TargetEncoder"
    Params = TargetParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import TargetEncoder as Sk

        if y is None or len(y) != len(frame):
            raise StepError(f"step '{params.name}' (TargetEncoder) needs the label at training; it "
                            "cannot run in the pre-split recipe or without a label", step=params.name)
        data, target = _target_inputs(frame, y, params.columns)
        encoder = Sk(smooth=params.smooth, target_type=params.target_type).fit(data, target)
        if encoder.target_type_ == "multiclass":
            raise StepError(f"step '{params.name}': the label has {len(encoder.classes_)} classes; "
                            "TargetEncoder here takes a binary or continuous label. Use OneHotEncoder",
                            step=params.name)
        mean = float(encoder.target_mean_)
        categories, encodings, missing = [], [], []
        for cats, codes in zip(encoder.categories_, encoder.encodings_):
            known = [(str(c), float(v)) for c, v in zip(cats, codes) if not pd.isna(c)]
            nan_codes = [float(v) for c, v in zip(cats, codes) if pd.isna(c)]
            categories.append([c for c, _ in known])
            encodings.append([v for _, v in known])
            missing.append(nan_codes[0] if nan_codes else mean)
        cross_fit = {"smooth": params.smooth, "target_type": encoder.target_type_, "cv": params.cv,
                     "shuffle": params.shuffle, "random_state": params.random_state, "name": params.name}
        return {"categories": categories, "encodings": encodings, "missing": missing, "target_mean": mean,
                "cross_fit": cross_fit}

    @classmethod
    def apply_training(cls, frame: pd.DataFrame, y: pd.Series | None, state: dict[str, Any]) -> pd.DataFrame:
        """Out-of-fold encodings of the training rows (see the class docstring); ``apply`` when the
        state has no cross-fit settings or no label is given."""
        if y is None or "cross_fit" not in state:
            return cls.apply(frame, state)
        encoded = _cross_fit(frame, y, state["columns"], state["cross_fit"])
        for i, column in enumerate(state["columns"]):
            frame[column] = encoded[:, i]
        return frame

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, cats, codes, missing in zip(state["columns"], state["categories"], state["encodings"],
                                                state["missing"]):
            table = dict(zip(cats, codes))
            values = text_values(frame, column)
            frame[column] = np.array([missing if v is None else table.get(v, state["target_mean"])
                                      for v in values], dtype="float64")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``state["encodings"]`` looked up per category text; the target mean for an unseen one,
        the column's ``missing`` encoding for a missing value."""
        return _lookup_kernel(state["columns"], state["categories"], state["encodings"],
                              [state["target_mean"]] * len(state["columns"]), state["missing"])


def _cross_fit(frame: pd.DataFrame, y: pd.Series, columns: list[str], settings: dict[str, Any]) -> np.ndarray:
    """sklearn ``TargetEncoder.fit_transform``'s cross fitting, written with the folds explicit so it
    reads the same on every supported sklearn: float64 array of shape (n_rows, n_columns) where row
    i holds the encodings an encoder fitted on the other folds gives it.

    Raises
    ------
    StepError
        When a fold could not hold every class (a binary label with fewer than ``cv`` rows of a class).
    """
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.preprocessing import TargetEncoder as Sk

    data, target = _target_inputs(frame, y, columns)
    binary = settings["target_type"] == "binary"
    smallest = int(pd.Series(target).value_counts().min()) if binary else len(target)
    if smallest < settings["cv"]:
        what = "rows of its rarer class" if binary else "rows"
        raise StepError(f"step '{settings['name']}' (TargetEncoder): cv: {settings['cv']} folds need at least "
                        f"{settings['cv']} training {what}; got {smallest}. Lower cv, or give more training rows",
                        step=settings["name"])
    seed = settings["random_state"] if settings["shuffle"] else None
    splitter = (StratifiedKFold if binary else KFold)(settings["cv"], shuffle=settings["shuffle"], random_state=seed)
    out = np.empty(data.shape, dtype="float64")
    for train, test in splitter.split(data, target):
        encoder = Sk(smooth=settings["smooth"], target_type=settings["target_type"]).fit(data[train], target[train])
        out[test] = encoder.transform(data[test])
    return out


class _UnknownParams(StepParams):
    """``handle_unknown`` of the encoders with a declared code for an unseen category: only
    ``value``; sklearn's ``error`` would fail a whole batch for one unseen value in it."""

    handle_unknown: Literal["value"] = "value"

    @field_validator("handle_unknown", mode="before")
    @classmethod
    def _no_error(cls, value: Any) -> Any:
        if value != "value":
            raise ValueError("must be 'value': 'error' would fail every row of a batch that holds one unseen "
                             "category, so a row's outcome would depend on its batch; set the declared unknown "
                             "code instead (unknown_value)")
        return value


class DummyParams(_UnknownParams):
    reference: dict[str, str] = Field(default_factory=dict)
    column_names: Literal["slug", "raw"] = "slug"


@register
class DummyEncoder(StepKind):
    """One-hot minus a reference level: one 0/1 float64 column per learned category except the
    column's reference level, which (like an unseen or missing value) gives all zeros.

    Categories are the sorted training texts (sklearn ``OneHotEncoder``'s); the reference level is
    ``reference: {column: category}`` where given, else the first category. The source column is
    dropped and the new columns are named as OneHotEncoder names them; applying is OneHotEncoder's
    (same state layout, same kernel).
    """

    kind = "DummyEncoder"
    Params = DummyParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import OneHotEncoder as Sk

        refuse_unlisted(params, "reference names", params.reference)
        categories, names, references = [], [], []
        for column in params.columns:
            data = _present(frame, column)
            cats = [str(c) for c in Sk().fit(data).categories_[0]] if len(data) else []
            reference = params.reference.get(column, cats[0] if cats else None)
            if column in params.reference and reference not in cats:
                raise StepError(f"step '{params.name}': reference level {reference!r} of column '{column}' is not "
                                f"among its training categories {cats[:10]}; name one of them", step=params.name)
            kept = [c for c in cats if c != reference]
            references.append(reference)
            categories.append(kept)
            names.append([f"{column}_{slug(c) if params.column_names == 'slug' else c}" for c in kept])
        _check_names(params.name, [n for group in names for n in group], frame, list(params.columns))
        return {"categories": categories, "names": names, "reference": references}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return OneHotEncoder.apply(frame, state)

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """OneHotEncoder's kernel over the categories less the reference levels."""
        return OneHotEncoder.kernel(state)


class LabelParams(_UnknownParams):
    unknown_value: int = -1
    missing_value: int = -1


@register
class LabelEncoder(StepKind):
    """Integer codes for a feature: each category becomes its position 0.0, 1.0, ... among the
    sorted training texts (sklearn ``LabelEncoder``'s classes), as float64.

    An unseen category gets ``unknown_value`` (default -1) and a missing value ``missing_value``
    (default -1): both declared, never learned from a batch. Applying is OrdinalEncoder's (same
    state layout, same kernel).
    """

    kind = "LabelEncoder"
    Params = LabelParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        from sklearn.preprocessing import LabelEncoder as Sk

        categories = []
        for column in params.columns:
            data = _present(frame, column)[:, 0]
            categories.append([str(c) for c in Sk().fit(data).classes_] if len(data) else [])
        return {"categories": categories, "unknown": float(params.unknown_value),
                "missing": float(params.missing_value)}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        return OrdinalEncoder.apply(frame, state)

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """OrdinalEncoder's kernel: the codes looked up per text."""
        return OrdinalEncoder.kernel(state)


class _Evidence:
    """Weight of evidence of categories from their counts: ``positive`` is the boolean label of the
    training rows (True: the positive class), ``a`` the regularization added to each count."""

    def __init__(self, positive: np.ndarray, a: float) -> None:
        self.a, self.pos_total, self.neg_total = a, float(positive.sum()), float((~positive).sum())

    def of(self, pos: Any, count: Any) -> Any:
        """``ln(((pos + a) / (P + 2a)) / ((neg + a) / (N + 2a)))``, ``neg = count - pos``; inf or NaN
        where a class count is 0 and ``a`` is 0."""
        a = self.a
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(((pos + a) / (self.pos_total + 2 * a)) / ((count - pos + a) / (self.neg_total + 2 * a)))


class WOEParams(_UnknownParams):
    regularization: float = Field(default=1.0, ge=0)
    unknown_value: float = 0.0


@register
class WOEEncoder(StepKind):
    """Replace each category by its weight of evidence for a binary label (float64).

    ``woe = ln(((pos_c + a) / (P + 2a)) / ((neg_c + a) / (N + 2a)))`` with ``pos_c``/``neg_c`` the
    category's training rows of the positive (the larger label, sklearn's ``classes_[1]``) and the
    other class, ``P``/``N`` all training rows of each, and ``a`` the declared ``regularization``
    (default 1.0: the count added to each cell). A missing value is its own category when the
    training rows had one. An unseen category (or an unseen missing value) gets ``unknown_value``
    (default 0.0: no evidence either way).
    """

    kind = "WOEEncoder"
    Params = WOEParams

    @staticmethod
    def learn(frame: pd.DataFrame, y: pd.Series | None, params: Any) -> dict[str, Any]:
        if y is None or len(y) != len(frame):
            raise StepError(f"step '{params.name}' (WOEEncoder) needs the label at training; it cannot run "
                            "in the pre-split recipe or without a label", step=params.name)
        from sklearn.preprocessing import LabelEncoder as Sk

        counted = pd.Series(y).notna().to_numpy()
        classes = Sk().fit(np.asarray(y)[counted]).classes_ if counted.any() else []
        if len(classes) != 2:
            raise StepError(f"step '{params.name}': WOEEncoder needs a label of 2 classes; got {len(classes)} "
                            f"({list(classes)[:5]}). Use TargetEncoder for a continuous label", step=params.name)
        positive = np.asarray(y)[counted] == classes[1]
        woe = _Evidence(positive, params.regularization)
        categories, encodings, missing = [], [], []
        for column in params.columns:
            texts = text_values(frame, column)[counted]
            gap = pd.isna(texts)
            stats = pd.Series(positive[~gap]).groupby(texts[~gap]).agg(["sum", "count"])
            values = woe.of(stats["sum"].to_numpy(), stats["count"].to_numpy())
            gap_value = woe.of(positive[gap].sum(), gap.sum()) if gap.any() else params.unknown_value
            if not np.isfinite([*values, gap_value]).all():
                raise StepError(f"step '{params.name}': column '{column}' has a category seen in one class only, "
                                f"so with regularization: {params.regularization} its weight of evidence is "
                                "infinite; set regularization above 0 (1.0 is usual)", step=params.name, column=column)
            categories.append([str(c) for c in stats.index])
            encodings.append([float(v) for v in values])
            missing.append(float(gap_value))
        return {"categories": categories, "encodings": encodings, "missing": missing,
                "unknown": params.unknown_value}

    @staticmethod
    def apply(frame: pd.DataFrame, state: dict[str, Any]) -> pd.DataFrame:
        for column, cats, codes, gap in zip(state["columns"], state["categories"], state["encodings"],
                                            state["missing"]):
            table = dict(zip(cats, codes))
            frame[column] = np.array([gap if v is None else table.get(v, state["unknown"])
                                      for v in text_values(frame, column)], dtype="float64")
        return frame

    @staticmethod
    def kernel(state: dict[str, Any]) -> Kernel:
        """``state["encodings"]`` looked up per category text; ``unknown`` for an unseen one, the
        column's ``missing`` entry for a missing value."""
        return _lookup_kernel(state["columns"], state["categories"], state["encodings"],
                              [state["unknown"]] * len(state["columns"]), state["missing"])
