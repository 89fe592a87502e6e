"""The Spark engine of the monitoring aggregates: the shapes of
:mod:`lakescore.monitoring.aggregates`, computed on the executors. Only those small values reach
the driver (one row of sums and counts, and a few small grouped tables).

Same definitions as the pandas engine, with two approximations, both stated where they apply:

- quantiles are ``percentile_approx`` with accuracy :data:`PERCENTILE_ACCURACY`: a value of the
  data whose rank is within ``n / accuracy`` of the exact rank, with no interpolation between
  neighbours (numpy interpolates linearly), so a quantile lies between the order statistics
  around ``q * (n - 1)``, widened by ``ceil(n / accuracy)`` ranks;
- ROC AUC counts positives and negatives per distinct probability (exact, as pandas) while
  ``approx_count_distinct`` finds at most :data:`EXACT_ROC_LIMIT` of them, else per bucket of
  width :data:`ROC_BUCKET` (pairs in one bucket count as ties: the error is at most half the
  share of positive-negative pairs that share a bucket).

Every function here needs pyspark (imported inside, as the rest of lakescore does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lakescore.monitoring.aggregates import (
    HASH_HEX,
    NA_TEXT,
    QUANTILES,
    SEPARATOR,
    Distribution,
    LabelHash,
    PerformanceCounts,
    RunAggregates,
)
from lakescore.monitoring.outputs import Output, chain_output
from lakescore.monitoring.report import histogram_column, histogram_edges

PERCENTILE_ACCURACY = 10_000  # Spark's default: relative rank error 1e-4
EXACT_ROC_LIMIT = 100_000  # distinct probabilities counted exactly for ROC AUC
ROC_BUCKET = 1e-5  # probability bucket width past that
EPS = 2.220446049250313e-16  # float64 machine epsilon: the log loss clip, as scikit-learn's


def _is_float(dtype: Any) -> bool:
    from pyspark.sql import types as T  # noqa: N812 (Spark's usual alias)

    return isinstance(dtype, (T.FloatType, T.DoubleType))


def _missing(frame: Any, column: str) -> Any:
    """Null, or NaN for a floating column (pandas' ``isna``)."""
    from pyspark.sql import functions as F  # noqa: N812

    value = F.col(column)
    return (value.isNull() | F.isnan(value)) if _is_float(frame.schema[column].dataType) else value.isNull()


def _text(frame: Any, column: str) -> Any:
    """``CAST(column AS STRING)`` with NaN as null (the pandas engine's :func:`spark_text`)."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.when(_missing(frame, column), F.lit(None)).otherwise(F.col(column).cast("string"))


def bin_index(frame: Any, column: str, entry: dict[str, Any]) -> Any:
    """The profile bin of each value of ``column`` (the last bin for missing values), a Column.

    Numeric: the number of edges below the value (bins ``(e[i-1], e[i]]``); categorical: the
    category's position, ``__other__`` after the categories, ``str(value)`` compared (booleans as
    ``True`` / ``False``, as Python writes them).
    """
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    dtype = frame.schema[column].dataType
    value = F.col(column)
    if entry["kind"] == "numeric":
        number = value.cast("double") if isinstance(dtype, T.NumericType) else value.try_cast("double")
        index = sum((F.when(number > float(e), 1).otherwise(0) for e in entry["edges"]), F.lit(0))
        last = len(entry["edges"]) + 1
    else:
        text = F.when(value, "True").otherwise("False") if isinstance(dtype, T.BooleanType) else value.cast("string")
        index = F.lit(len(entry["categories"]))
        for position, category in reversed(list(enumerate(entry["categories"]))):
            index = F.when(text == category, position).otherwise(index)
        last = len(entry["categories"]) + 1
    return F.when(_missing(frame, column), last).otherwise(index)


def _performance_exprs(frame: Any, label: str, classifier: bool) -> dict[str, Any]:
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    predicted = F.coalesce(F.col("scoring_status") == "predicted", F.lit(False))
    known = ~_missing(frame, label)
    use = predicted & known
    truth, guess = F.col(label), F.col("prediction")
    out = {"labelled_rows": F.count(F.when(use, 1)), "labelled_excluded": F.count(F.when(~predicted & known, 1))}
    if not classifier:
        error = truth.cast("double") - guess.cast("double")
        return {**out, "squared_error_sum": F.sum(F.when(use, error * error)),
                "absolute_error_sum": F.sum(F.when(use, F.abs(error)))}
    types = frame.schema[label].dataType, frame.schema["prediction"].dataType
    numeric = all(isinstance(t, (T.NumericType, T.BooleanType)) for t in types)
    same = (truth.cast("double") == guess.cast("double")) if numeric else (truth.cast("string") == guess.cast("string"))
    label_numeric = isinstance(types[0], (T.NumericType, T.BooleanType))
    one = (truth.cast("double") == 1.0) if label_numeric else F.lit(False)
    zero = (truth.cast("double") == 0.0) if label_numeric else F.lit(False)
    p = F.greatest(F.least(F.col("probability").cast("double"), F.lit(1 - EPS)), F.lit(EPS))
    return {**out, "correct": F.count(F.when(use & same, 1)), "positives": F.count(F.when(use & one, 1)),
            "negatives": F.count(F.when(use & zero, 1)), "other_labels": F.count(F.when(use & ~one & ~zero, 1)),
            "log_loss_sum": F.sum(F.when(use & one, -F.log(p)).when(use & zero, -F.log(1 - p))),
            "roc_distinct": F.approx_count_distinct(F.when(use & (one | zero), F.col("probability")))}


def _label_hash_exprs(frame: Any, keys: list[str], label: str) -> dict[str, Any]:
    from pyspark.sql import functions as F  # noqa: N812

    texts = [F.coalesce(_text(frame, c), F.lit(NA_TEXT)) for c in [*keys, label]]
    row = F.conv(F.substring(F.sha2(F.concat_ws(SEPARATOR, *texts), 256), 1, HASH_HEX), 16, 10)
    return {"hash_rows": F.count(F.lit(1)), "hash_total": F.sum(row.cast("decimal(38,0)"))}


@dataclass(frozen=True)
class RocGrouping:
    """How :func:`_tallies` counts the ROC pairs, as Columns: the rows (``use``: predicted,
    labelled 0 or 1), their group (``key``: the probability, or its :data:`ROC_BUCKET` bucket's
    lower edge) and whether each is a positive."""

    use: Any
    key: Any
    positive: Any


def _roc_grouping(frame: Any, row: dict[str, Any], label: str | None, exact_roc_limit: int) -> RocGrouping | None:
    """The ROC grouping of a classifier's labelled run, from its wide aggregate ``row``: per
    distinct probability while ``approx_count_distinct`` finds at most ``exact_roc_limit`` of
    them, else per bucket; None when there is no ROC AUC to count (no label, a regressor, one
    class only, or labels other than 0 and 1)."""
    from pyspark.sql import functions as F  # noqa: N812

    if label is None or not (row["positives"] and row["negatives"]) or row["other_labels"]:
        return None
    truth = F.col(label).cast("double")
    use = (F.col("scoring_status") == "predicted") & truth.isin(0.0, 1.0) & ~_missing(frame, label)
    score = F.col("probability").cast("double")
    key = score if _roc_exact(row, exact_roc_limit) else F.floor(score / ROC_BUCKET) * ROC_BUCKET
    return RocGrouping(use, key, truth == 1.0)


def spark_aggregates(frame: Any, *, inputs: dict[str, str] | None = None, label: str | None = None,
                     keys: list[str] | None = None, profile: dict[str, Any] | None = None,
                     exact_roc_limit: int = EXACT_ROC_LIMIT, outputs: tuple[Output, ...] = ()) -> RunAggregates:
    """:class:`RunAggregates` of one run and model version, computed by Spark on the executors.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame
        The run's stored outcomes (``scoring_status``, ``exclusion_reason``, ``prediction``,
        ``probability`` for a classifier; a model set's output columns instead), joined with its
        inputs and its label.
    inputs : dict of str to str or None
        Model input column -> its column in ``frame`` (null counts and feature bins); None: not read.
    label : str or None
        The label's column in ``frame``; None without a label table.
    keys : list of str or None
        Record keys: with ``label``, the label hash is computed.
    profile : dict or None
        The training drift profile whose bins are counted.
    exact_roc_limit : int, default 100,000
        Most distinct probabilities counted exactly for ROC AUC (buckets of 1e-5 past it).
    outputs : tuple of Output, default ()
        A model set's outputs (:func:`lakescore.monitoring.outputs.set_outputs`), each summarised
        on its own; empty: a chain's ``prediction``.

    Returns
    -------
    RunAggregates
        The same shapes as :func:`~lakescore.monitoring.aggregates.pandas_aggregates`.
    """
    from pyspark.sql import functions as F  # noqa: N812

    classifier = "probability" in frame.columns
    summarised = outputs or (chain_output(frame.columns),)
    exprs: dict[str, Any] = {}
    for i, output in enumerate(summarised):
        exprs.update(_value_exprs(frame, output, f"o{i}_"))
    names = dict(inputs or {})
    for i, (_name, column) in enumerate(names.items()):
        exprs[f"null_{i}"] = F.count(F.when(_missing(frame, column), 1))
    binned = _profile_bins(frame, names, profile)
    measured = label is not None and "prediction" in frame.columns  # a model set's rows: see monitoring.outputs
    if measured:
        exprs.update(_performance_exprs(frame, label, classifier))  # type: ignore[arg-type]  # measured implies a label
    if label is not None and keys is not None:
        exprs.update(_label_hash_exprs(frame, keys, label))
    row = frame.agg(*[e.alias(n) for n, e in exprs.items()]).collect()[0].asDict()
    roc = _roc_grouping(frame, row, label if measured and classifier else None, exact_roc_limit)
    tallies = _tallies(frame, [o for o in summarised if o.label], binned, roc)
    found = {o.name: _distribution(o, row, f"o{i}_", tallies.classes.get(o.name)) for i, o in enumerate(summarised)}
    main = Distribution() if outputs else found[""]
    return RunAggregates(
        outcomes=tallies.outcomes,
        null_counts={name: int(row[f"null_{i}"]) for i, name in enumerate(names)} if inputs is not None else None,
        bins=tallies.bins,
        classes=main.classes, value_column=main.value_column, value_sum=main.value_sum,
        value_count=main.value_count, quantiles=main.quantiles,
        performance=_performance(row, label if measured else None, classifier, tallies.roc, exact_roc_limit),
        label_hash=LabelHash(int(row["hash_rows"]), int(row["hash_total"] or 0))
        if label is not None and keys is not None else None,
        outputs={o.name: found[o.name] for o in outputs},
    )


def _value_exprs(frame: Any, output: Output, prefix: str) -> dict[str, Any]:
    """Sum, count and quantiles of ``output``'s values over the predicted rows (none for a label alone)."""
    from pyspark.sql import functions as F  # noqa: N812

    column = output.value_column
    if column is None:
        return {}
    value = F.when((F.col("scoring_status") == "predicted") & ~_missing(frame, column), F.col(column).cast("double"))
    return {f"{prefix}sum": F.sum(value), f"{prefix}count": F.count(value),
            f"{prefix}quantiles": F.percentile_approx(value, [q / 100 for q in QUANTILES], PERCENTILE_ACCURACY)}


def _distribution(output: Output, row: dict[str, Any], prefix: str, classes: dict[Any, int] | None) -> Distribution:
    """:class:`Distribution` of ``output`` from the aggregate ``row`` (:func:`_value_exprs`) and,
    when it is a label, its class counts (:func:`_tallies`)."""
    if output.value_column is None:
        return Distribution(classes=classes, value_column=output.value_role)
    count = int(row[f"{prefix}count"])
    quantiles = row[f"{prefix}quantiles"] if count else None
    return Distribution(classes=classes, value_column=output.value_role, value_sum=float(row[f"{prefix}sum"] or 0.0),
                        value_count=count,
                        quantiles={f"p{q}": float(v) for q, v in zip(QUANTILES, quantiles)} if quantiles else {})


def _profile_bins(frame: Any, inputs: dict[str, str], profile: dict[str, Any] | None) -> list[tuple[str, Any, int, Any]]:
    """(profiled column, bin index Column, bins, rows counted) of each profiled feature among
    ``inputs`` and of the profiled prediction column (predicted rows only)."""
    from pyspark.sql import functions as F  # noqa: N812

    if not profile:
        return []
    out = [(name, bin_index(frame, inputs[name], entry), _size(entry), F.lit(True))
           for name, entry in profile.get("features", {}).items() if name in inputs]
    entry = profile.get("prediction")
    if entry and entry["column"] in frame.columns:
        out.append(("prediction", bin_index(frame, entry["column"], entry), _size(entry),
                    F.coalesce(F.col("scoring_status") == "predicted", F.lit(False))))
    return out


@dataclass(frozen=True)
class Tallies:
    """The grouped counts of one run (:func:`_tallies`): rows per (``scoring_status``,
    ``exclusion_reason``), per class of each label output (output name -> class -> rows), per bin
    of each profiled column (column -> rows per bin), and the ROC counts ((probability,
    positives, negatives), ascending; empty without a :class:`RocGrouping`)."""

    outcomes: dict[tuple[Any, Any], int]
    classes: dict[str, dict[Any, int]]
    bins: dict[str, list[float]]
    roc: tuple[tuple[float, int, int], ...]


def _tallies(frame: Any, labels: list[Output], binned: list[tuple[str, Any, int, Any]],
             roc: RocGrouping | None) -> Tallies:
    """Rows per outcome, per class of each of the ``labels`` outputs (predicted rows whose class
    is known), per bin of each profiled column (:func:`_profile_bins`) and per ROC group and
    label, counted in one grouped aggregate on the executors: only those counts reach the driver.

    Each row becomes one (facet, value) pair per tally (``explode``) and one ``groupBy`` counts
    them all: one job over the run's joined rows instead of one per tally, since each job
    recomputes the join of the run's rows with its inputs and labels (the demo's 84,292-row run on
    local[2], in a fresh process: four jobs took 19-20 s, this one takes 9-12 s). The bins are
    grouped rather than one ``count(CASE ...)`` per bin in the run's wide aggregate: Spark's code
    generation for 128 such counts took 53-59 s there. A pair's fields are typed as the frame's columns, so a class comes back as the value it is.
    """
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql import types as T  # noqa: N812

    schema = frame.schema
    fields = {"status": schema["scoring_status"].dataType, "reason": schema["exclusion_reason"].dataType,
              **{f"class_{i}": schema[o.prediction].dataType for i, o in enumerate(labels)},
              "bin": T.IntegerType(), "p": T.DoubleType(), "positive": T.BooleanType()}

    def pair(facet: int, **values: Any) -> Any:
        return F.struct(F.lit(facet).alias("facet"),
                        *[(values[n] if n in values else F.lit(None)).cast(t).alias(n) for n, t in fields.items()])

    predicted = F.coalesce(F.col("scoring_status") == "predicted", F.lit(False))
    facets: list[tuple[str, str]] = [("outcome", ""), *[("class", o.name) for o in labels],
                                     *[("bin", name) for name, _, _, _ in binned]]
    pairs = [pair(0, status=F.col("scoring_status"), reason=F.col("exclusion_reason"))]
    pairs += [F.when(predicted & ~_missing(frame, o.prediction), pair(1 + i, **{f"class_{i}": F.col(o.prediction)}))
              for i, o in enumerate(labels)]
    pairs += [F.when(only, pair(1 + len(labels) + j, bin=index)) for j, (_, index, _, only) in enumerate(binned)]
    if roc is not None:
        pairs.append(F.when(roc.use, pair(len(facets), p=roc.key, positive=roc.positive)))
        facets.append(("roc", ""))
    counted = (frame.select(F.explode(F.array(*pairs)).alias("pair")).where(F.col("pair").isNotNull())
               .select("pair.*").groupBy("facet", *fields).count().collect())
    outcomes: dict[tuple[Any, Any], int] = {}
    classes: dict[str, dict[Any, int]] = {o.name: {} for o in labels}
    bins = {name: [0.0] * size for name, _, size, _ in binned}
    curve: dict[float, list[int]] = {}
    for r in counted:
        (kind, name), count = facets[int(r["facet"])], int(r["count"])
        if kind == "outcome":
            outcomes[(r["status"], r["reason"])] = count
        elif kind == "class":
            classes[name][r[f"class_{int(r['facet']) - 1}"]] = count
        elif kind == "bin":
            bins[name][int(r["bin"])] = float(count)
        else:
            curve.setdefault(float(r["p"]), [0, 0])[0 if r["positive"] else 1] += count
    return Tallies(outcomes, classes, bins, tuple((p, pos, neg) for p, (pos, neg) in sorted(curve.items())))


def _size(entry: dict[str, Any]) -> int:
    return len(entry["edges"]) + 2 if entry["kind"] == "numeric" else len(entry["categories"]) + 2


def _roc_exact(row: dict[str, Any], exact_roc_limit: int) -> bool:
    """Whether ROC AUC is counted per distinct probability: ``approx_count_distinct`` of the
    labelled rows' probabilities (the wide aggregate ``row``) is at most ``exact_roc_limit``."""
    return int(row["roc_distinct"]) <= exact_roc_limit


def _performance(row: dict[str, Any], label: str | None, classifier: bool,
                 roc: tuple[tuple[float, int, int], ...], exact_roc_limit: int) -> PerformanceCounts:
    if label is None:
        return PerformanceCounts(classifier=classifier)
    base: dict[str, Any] = {"classifier": classifier, "labelled": True, "labelled_rows": int(row["labelled_rows"]),
            "labelled_excluded": int(row["labelled_excluded"])}
    if not classifier:
        return PerformanceCounts(**base, squared_error_sum=float(row["squared_error_sum"] or 0.0),
                                 absolute_error_sum=float(row["absolute_error_sum"] or 0.0))
    counts: dict[str, Any] = {k: int(row[k]) for k in ("correct", "positives", "negatives", "other_labels")}
    return PerformanceCounts(**base, **counts, log_loss_sum=float(row["log_loss_sum"] or 0.0), roc=roc,
                             roc_exact=_roc_exact(row, exact_roc_limit))


def spark_labels(source: Any, *, keys: list[str], column: str, expression: str | None, empty: pd.DataFrame) -> Any:
    """The label table's record keys and ``_label`` as a Spark DataFrame, derived on the executors.

    ``expression`` is evaluated by :func:`lakescore.frames.derive_label` on each Arrow batch
    (``mapInPandas``), so the label means the same as on the pandas route; its type is that of
    ``derive_label`` on ``empty`` (the table's columns, no rows).
    """
    from pyspark.sql import types as T  # noqa: N812

    from lakescore.frames import derive_label, expression_columns

    if expression is None:
        label = source[column].cast("long") if isinstance(source.schema[column].dataType, T.BooleanType) \
            else source[column]
        return source.select(*keys, label.alias("_label"))
    kind = derive_label(empty, column=column, expression=expression).dtype
    spark_type = (T.LongType() if pd.api.types.is_integer_dtype(kind) else T.DoubleType()
                  if pd.api.types.is_float_dtype(kind) else T.StringType())
    schema = T.StructType([*source.select(*keys).schema.fields, T.StructField("_label", spark_type)])
    names = [c for c in expression_columns(expression) if c not in keys]

    def derive(batches: Any) -> Any:
        for batch in batches:
            yield batch[keys].assign(_label=derive_label(batch, column=column, expression=expression))

    return source.select(*keys, *names).mapInPandas(derive, schema)


def spark_calibration_bins(frame: Any, label: str, *, bins: int = 10) -> list[tuple[int, float, float]]:
    """(rows, sum of probability, sum of label) per equal-width probability bin of the predicted,
    labelled rows: the Spark engine of :func:`lakescore.monitoring.report.calibration_bins`."""
    from pyspark.sql import functions as F  # noqa: N812

    inner = [float(e) for e in np.linspace(0, 1, bins + 1)[1:-1]]
    p = F.col("probability").cast("double")
    which = sum((F.when(p >= e, 1).otherwise(0) for e in inner), F.lit(0))
    use = (F.col("scoring_status") == "predicted") & ~_missing(frame, label) & ~_missing(frame, "probability")
    exprs = []
    for b in range(bins):
        hit = use & (which == b)
        exprs += [F.count(F.when(hit, 1)), F.sum(F.when(hit, p)), F.sum(F.when(hit, F.col(label).cast("double")))]
    row = list(frame.agg(*exprs).collect()[0])
    return [(int(row[3 * b]), float(row[3 * b + 1] or 0.0), float(row[3 * b + 2] or 0.0)) for b in range(bins)]


def spark_histogram_bins(frame: Any, *, bins: int = 30) -> tuple[str, dict[int, tuple[list[float], list[int]]]]:
    """The value column and, per model version, (edges, counts) of its predicted rows' values:
    the Spark engine of :func:`lakescore.monitoring.report.histogram_bins` (two passes: the range
    of each version, then the counts)."""
    from pyspark.sql import functions as F  # noqa: N812

    column = histogram_column(frame.columns)
    value = F.col(column).cast("double")
    scored = frame.where((F.col("scoring_status") == "predicted") & ~_missing(frame, column))
    ranges = scored.groupBy("model_version").agg(F.min(value).alias("low"), F.max(value).alias("high")).collect()
    edges = {int(r["model_version"]): histogram_edges(float(r["low"]), float(r["high"]), bins=bins)
             for r in ranges if r["model_version"] is not None}
    if not edges:
        return column, {}
    index = F.lit(None)
    for version, e in edges.items():
        low, width = e[0], (e[-1] - e[0]) / bins
        index = F.when(F.col("model_version") == version,
                       F.least(F.floor((value - low) / width), F.lit(bins - 1)).cast("int")).otherwise(index)
    counted = scored.groupBy("model_version", index.alias("b")).count().collect()
    counts = {v: [0] * bins for v in edges}
    for r in counted:
        if r["model_version"] is not None and r["b"] is not None:
            counts[int(r["model_version"])][int(r["b"])] += int(r["count"])
    return column, {v: (edges[v], counts[v]) for v in edges}
