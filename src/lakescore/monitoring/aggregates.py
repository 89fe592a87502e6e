"""The aggregates a quality row is made of, and their pandas engine.

Every monitoring figure is split in two: an aggregate that an engine computes where the rows
are, and a pure function of the aggregate (:func:`lakescore.monitoring.quality.figures`,
:func:`lakescore.monitoring.performance.performance_figures`,
:func:`lakescore.monitoring.drift.drift_from_counts`, :func:`lakescore.monitoring.labels.digest`).
This module holds the shapes and the pandas engine (single-node route); the Spark engine
(:mod:`lakescore.monitoring.spark_aggregates`) computes the same shapes on the executors, so only
these small values ever reach the driver:

- counts of stored outcomes by (``scoring_status``, ``exclusion_reason``);
- null counts per model input column;
- counts per PSI bin per profiled column (the training profile's bins);
- prediction counts per class value, the sum and count of probabilities, five quantiles;
- performance counts (:class:`PerformanceCounts`);
- the label hash (:class:`LabelHash`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

from lakescore.monitoring.drift import profile_counts
from lakescore.monitoring.outputs import Output, chain_output

QUANTILES = (5, 25, 50, 75, 95)  # per cent
NA_TEXT = "<NA>"  # a missing key or label in the label hash
SEPARATOR = "\x1f"  # between the texts of one row's keys and label in the label hash
HASH_HEX = 15  # leading hex digits of a row's SHA-256 summed (60 bits: a sum of 2**67 rows fits decimal(38))


@dataclass(frozen=True)
class PerformanceCounts:
    """What performance needs, as sums over the predicted rows whose label is known.

    ``labelled`` is False when there is no label table. Classification (``classifier``) keeps
    ``correct`` (prediction equals label), ``positives`` / ``negatives`` / ``other_labels``
    (labels 1, 0, anything else), ``log_loss_sum`` (sum of -ln of the clipped probability of the
    true class, over rows labelled 0 or 1) and ``roc`` ((probability, positives, negatives) per
    distinct probability, or per bucket, ascending). Regression keeps the sums of squared and
    absolute errors.
    """

    classifier: bool
    labelled: bool = False
    labelled_rows: int = 0
    labelled_excluded: int = 0
    correct: int = 0
    positives: int = 0
    negatives: int = 0
    other_labels: int = 0
    log_loss_sum: float = 0.0
    roc: tuple[tuple[float, int, int], ...] = ()
    roc_exact: bool = True
    squared_error_sum: float = 0.0
    absolute_error_sum: float = 0.0


@dataclass(frozen=True)
class LabelHash:
    """Sum over a run's rows of the leading 60 bits of SHA-256 of (record key texts, label text).

    Row order does not matter; a missing label hashes as ``<NA>``, so a label arriving changes
    the sum. Texts follow Spark's ``CAST(... AS STRING)`` (:func:`spark_text`), so the pandas
    and Spark engines give the same sum.
    """

    rows: int
    total: int


@dataclass(frozen=True)
class Distribution:
    """One output's predicted rows: class counts (None: not a label), and the sum, count and
    :data:`QUANTILES` of its values (``value_column``: ``probability`` or ``prediction``)."""

    classes: dict[Any, int] | None = None
    value_column: str = "prediction"
    value_sum: float = 0.0
    value_count: int = 0
    quantiles: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunAggregates:
    """Aggregates of one run's rows scored by one model version.

    ``outcomes`` maps (``scoring_status``, ``exclusion_reason``) to rows (None for a null);
    ``null_counts`` maps each model input column to its missing rows (None: inputs not read);
    ``bins`` maps each profiled column (``prediction`` too) to counts per bin; ``classes`` maps
    each predicted class value to rows (None for a regressor); ``value_column`` is
    ``probability`` or ``prediction``, with its sum, count and :data:`QUANTILES`. A model set's rows
    have none of these (classes None, no values); ``outputs`` holds each of its outputs'
    (:func:`lakescore.monitoring.outputs.set_outputs`), by output name.
    """

    outcomes: dict[tuple[str | None, str | None], int]
    null_counts: dict[str, int] | None = None
    bins: dict[str, list[float]] = field(default_factory=dict)
    classes: dict[Any, int] | None = None
    value_column: str = "prediction"
    value_sum: float = 0.0
    value_count: int = 0
    quantiles: dict[str, float] = field(default_factory=dict)
    performance: PerformanceCounts = PerformanceCounts(classifier=False)
    label_hash: LabelHash | None = None
    outputs: dict[str, Distribution] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Stored outcomes (rows) of the run and model version."""
        return sum(self.outcomes.values())


def java_double(value: float) -> str:
    """``value`` as Spark writes a double as text (Java's ``Double.toString``): plain decimals
    for 1e-3 <= |x| < 1e7, ``d.dddE<n>`` otherwise; shortest round-trip digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))  # Python writes this range the same way ("0.001", "123.0", "-0.0")
    sign, digits, exponent = Decimal(repr(float(value))).as_tuple()
    power = int(exponent) + len(digits) - 1
    text = "".join(map(str, digits)).rstrip("0") or "0"
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def spark_text(values: pd.Series) -> list[str]:
    """Each value as Spark's ``CAST(value AS STRING)`` writes it (:data:`NA_TEXT` when missing).

    Integers, text, booleans (``true`` / ``false``) and doubles (:func:`java_double`) agree with
    Spark; other types (timestamps, decimals) use ``str``.
    """
    out = []
    for value in values.astype(object):
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            out.append(NA_TEXT)
        elif isinstance(value, (bool, np.bool_)):
            out.append("true" if value else "false")
        elif isinstance(value, (int, np.integer)):
            out.append(str(int(value)))
        elif isinstance(value, (float, np.floating)):
            out.append(java_double(float(value)))
        else:
            out.append(str(value))
    return out


def row_hash(text: str) -> int:
    """The leading :data:`HASH_HEX` hex digits of SHA-256 of ``text`` (UTF-8), as an integer."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_HEX], 16)


def label_hash(frame: pd.DataFrame, keys: list[str], labels: pd.Series | None) -> LabelHash | None:
    """:class:`LabelHash` of ``frame``'s rows (pandas engine); None without labels."""
    if labels is None:
        return None
    columns = [spark_text(frame[k].reset_index(drop=True)) for k in keys]
    columns.append(spark_text(pd.Series(labels).reset_index(drop=True)))
    total = sum(row_hash(SEPARATOR.join(texts)) for texts in zip(*columns))
    return LabelHash(rows=len(frame), total=total)


def performance_counts(predictions: pd.DataFrame, labels: pd.Series | None) -> PerformanceCounts:
    """:class:`PerformanceCounts` of ``predictions`` with ``labels`` aligned by position (pandas engine).

    Probabilities are clipped to ``[eps, 1 - eps]`` (float64 machine epsilon) for the log loss,
    as scikit-learn's ``log_loss`` does; ``roc`` is exact (one entry per distinct probability).
    """
    classifier = "probability" in predictions.columns
    if labels is None or "prediction" not in predictions.columns:  # a model set: see monitoring.outputs
        return PerformanceCounts(classifier=classifier)
    labels = pd.Series(labels).reset_index(drop=True)
    predicted = (predictions["scoring_status"] == "predicted").to_numpy()
    known = labels.notna().to_numpy()
    use = predicted & known
    base: dict[str, Any] = {"classifier": classifier, "labelled": True, "labelled_rows": int(use.sum()),
            "labelled_excluded": int((~predicted & known).sum())}
    if not use.any():
        return PerformanceCounts(**base)
    truth = labels[use].to_numpy()
    scored = predictions.reset_index(drop=True)[use]
    if not classifier:
        error = truth.astype("float64") - scored["prediction"].to_numpy(dtype="float64")
        return PerformanceCounts(**base, squared_error_sum=float(np.sum(error ** 2)),
                                 absolute_error_sum=float(np.sum(np.abs(error))))
    guess = scored["prediction"].to_numpy()
    if pd.api.types.is_numeric_dtype(labels.dtype) and pd.api.types.is_numeric_dtype(scored["prediction"].dtype):
        correct = int(np.sum(truth.astype("float64") == guess.astype("float64")))
    else:  # text classes: compare as text
        correct = sum(str(a) == str(b) for a, b in zip(truth, guess))
    binary = pd.Series(truth, dtype=object).isin([0, 1]).to_numpy()
    y, prob = truth[binary].astype("int64"), scored["probability"].to_numpy(dtype="float64")[binary]
    eps = np.finfo("float64").eps
    clipped = np.clip(prob, eps, 1 - eps)
    loss = float(np.sum(np.where(y == 1, -np.log(clipped), -np.log(1 - clipped))))
    hist = pd.DataFrame({"p": prob, "pos": y == 1, "neg": y == 0}).groupby("p", sort=True)[["pos", "neg"]].sum()
    roc = tuple((float(p), int(r.pos), int(r.neg)) for p, r in zip(hist.index, hist.itertuples()))
    return PerformanceCounts(**base, correct=correct, positives=int((y == 1).sum()), negatives=int((y == 0).sum()),
                             other_labels=int((~binary).sum()), log_loss_sum=loss, roc=roc)


def pandas_distribution(scored: pd.DataFrame, output: Output) -> Distribution:
    """:class:`Distribution` of ``output`` over the predicted rows ``scored`` (pandas engine)."""
    classes = None
    if output.label:
        counted = scored[output.prediction].dropna().value_counts()
        classes = {k: int(v) for k, v in counted.items()}
        if pd.api.types.is_float_dtype(counted.index.dtype):
            classes = {float(k): v for k, v in classes.items()}
    if output.value_column is None:
        return Distribution(classes=classes, value_column=output.value_role)
    every = scored[output.value_column].astype("float64")
    values = every.dropna()
    return Distribution(
        classes=classes, value_column=output.value_role, value_sum=float(every.sum()), value_count=int(len(values)),
        quantiles={f"p{q}": float(np.quantile(values, q / 100)) for q in QUANTILES} if len(values) else {})


def pandas_aggregates(predictions: pd.DataFrame, *, inputs: pd.DataFrame | None = None,
                      labels: pd.Series | None = None, profile: dict[str, Any] | None = None,
                      keys: list[str] | None = None, outputs: tuple[Output, ...] = ()) -> RunAggregates:
    """:class:`RunAggregates` of one run and model version, computed with pandas.

    Parameters
    ----------
    predictions : DataFrame of shape (n_rows, ...)
        The stored outcomes (``scoring_status``, ``exclusion_reason``, ``prediction``,
        ``probability`` for a classifier; a model set's output columns instead).
    inputs : DataFrame of shape (n_rows, n_inputs) or None
        The model's input columns of the same rows, for null counts and feature bins.
    labels : Series of shape (n_rows,) or None
        True outcomes aligned with ``predictions`` by position.
    profile : dict or None
        The training drift profile: its bins are counted.
    keys : list of str or None
        Record keys: with ``labels``, the label hash is computed.
    outputs : tuple of Output, default ()
        A model set's outputs (:func:`lakescore.monitoring.outputs.set_outputs`), each summarised
        on its own; empty: a chain's ``prediction``.
    """
    outcomes = predictions.groupby(["scoring_status", "exclusion_reason"], dropna=False).size() \
        if len(predictions) else pd.Series([], dtype="int64")
    scored = predictions[predictions["scoring_status"] == "predicted"]
    main = Distribution() if outputs else pandas_distribution(scored, chain_output(predictions.columns))
    return RunAggregates(
        outcomes={(_none(s), _none(r)): int(n) for (s, r), n in outcomes.items()},
        null_counts={c: int(inputs[c].isna().sum()) for c in inputs.columns} if inputs is not None else None,
        bins=profile_counts(profile, inputs if inputs is not None else pd.DataFrame(), predictions) if profile else {},
        classes=main.classes, value_column=main.value_column, value_sum=main.value_sum, value_count=main.value_count,
        quantiles=main.quantiles,
        performance=performance_counts(predictions, labels),
        label_hash=label_hash(predictions, keys, labels) if keys is not None else None,
        outputs={o.name: pandas_distribution(scored, o) for o in outputs},
    )


def _none(value: Any) -> Any:
    return None if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) else str(value)
