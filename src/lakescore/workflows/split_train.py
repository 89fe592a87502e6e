"""Training above ``max_rows``: search on a sample, refit on every row's slice, paste, register once.

``lakescore train`` comes here when the training table holds more than training.yml ``max_rows``
rows. The rows stay in Spark; the driver holds at most ``max_rows`` training rows and ``max_rows``
holdout rows. Each row's fate comes from a stable hash of its record keys (:mod:`lakescore.slices`).
Every row count here (training rows, sample, slices, left out) counts table rows before
``data.filter``, which is a pandas expression applied on the driver's sample and each worker's slice.

1. **search** (driver): the holdout is set aside from the whole table; the configuration is fitted
   on a sample of ``max_rows`` training rows, its threshold chosen and its metrics measured on the
   holdout, as ``lakescore train`` does for a table that fits.
2. **refit** (workers): :func:`lakescore.slices.plan_split` decides the slices, or refuses (then
   the sampled fit is registered with the reason). Each worker fits the whole chain on its slice
   (:func:`lakescore.split_fit.fit_slice`).
3. **assemble** (driver): the slice chains are pasted (:mod:`lakescore.pasting`), admitted like a
   model set (every member, then the whole) and compared with the sampled fit on the same holdout:
   a paste worse than the sample (log loss, or RMSE) is not registered.
4. **register**: one version, whose description, model config (``split_training``) and summary
   (``split``) say the rows covered, the slices, rows left out, and that pasting is not one fit
   over every row. Its metrics are the search's on the holdout it kept, never slice averages.

Each phase is claimed in the runtime's phase store (:meth:`Runtime.phase_store`) after the one
before it finished, so two runners cannot both move a job on. If no worker starts, every slice
fails, or assembling fails, the sampled fit is registered with a note saying so and why.
Faults for tests: ``LAKESCORE_SPLIT_FAULT`` = ``no_workers`` | ``slices`` | ``assemble``.
"""

from __future__ import annotations

import os
import pickle
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import pandas as pd

from lakescore import progress
from lakescore.admission.combined import admit_set
from lakescore.admission.evidence import admit
from lakescore.chain import FittedChain
from lakescore.config import ProjectConfig
from lakescore.errors import SplitTrainingError
from lakescore.pasting import NOTE, PastingEnsemble, paste
from lakescore.runtime import Runtime
from lakescore.slices import CODE_COLUMNS, SplitPlan, in_holdout, key_codes, plan_split, slice_of
from lakescore.split_fit import HOLDOUT_COLUMN, RESULT_SCHEMA, SLICE_COLUMN, Fault, arrow_frame, fit_slice
from lakescore.steps.recipe import PreSplit
from lakescore.training import fit_project_chain, holdout_metrics, prepare_rows, with_threshold
from lakescore.training_fingerprint import TrainingFingerprint
from lakescore.workflows.registration import TrainResult, register

FAULT_ENV = "LAKESCORE_SPLIT_FAULT"
SAMPLED_NOTE = "sampled fit: one process fitted {fitted:,} of the {rows:,} training rows; {why}"


@dataclass
class Search:
    """What the search phase hands over: the sampled chain, its holdout and its metrics."""

    chain: FittedChain
    pre: PreSplit
    training: pd.DataFrame
    holdout: pd.DataFrame
    truth: pd.Series
    metrics: dict[str, float]
    sampled_rows: int  # table rows in the sample, before data.filter (as every split count is)
    seconds: dict[str, float] = field(default_factory=dict)


def _fault() -> Fault | None:
    value = os.environ.get(FAULT_ENV) or None
    return cast(Fault, value) if value in ("no_workers", "slices", "assemble") else None


def _workers(spark: Any, configured: int | None) -> int:
    """``split_training.max_workers``, else the session's default parallelism (task slots)."""
    if configured is not None:
        return configured
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no sparkContext: its conf says it, else 2
        return int(spark.conf.get("spark.default.parallelism", "2"))


def coded_rows(frame: Any, keys: list[str], *, salt: int, holdout_fraction: float) -> Any:
    """A Spark DataFrame with :data:`lakescore.slices.CODE_COLUMNS` and ``_holdout`` added to every
    row, computed on the executors by :func:`lakescore.slices.key_codes` (``mapInArrow``): the same
    codes as pandas gives the same rows."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType(frame.schema.fields + [StructField(c, LongType(), False) for c in CODE_COLUMNS])

    def add_codes(batches: Any) -> Any:
        for batch in batches:
            codes = key_codes(pa.Table.from_batches([batch]).to_pandas(types_mapper=_nullable), keys, salt=salt)
            columns = [*batch.columns, *(pa.array(codes[c].to_numpy()) for c in CODE_COLUMNS)]
            yield pa.RecordBatch.from_arrays(columns, names=[*batch.schema.names, *CODE_COLUMNS])

    coded = frame.mapInArrow(add_codes, schema)
    return coded.withColumn(HOLDOUT_COLUMN, in_holdout(F.col("_holdout_code"), holdout_fraction))


def _nullable(arrow_type: Any) -> Any:
    from lakescore.frames import nullable_pandas_type

    return nullable_pandas_type(arrow_type)


def train_above_max_rows(project: ProjectConfig, runtime: Runtime, *, fingerprint: TrainingFingerprint,
                         features: Any, note: str, job_id: str | None = None) -> TrainResult:
    """Train a table of more than ``max_rows`` rows (see the module docstring).

    Parameters
    ----------
    fingerprint : TrainingFingerprint
        The training fingerprint (its ``source_version`` is the version read).
    features : FeatureTables
        The feature tables read (none: split training refuses feature lookups in config).
    note : str
        Why training runs (the summary's note).
    job_id : str, optional
        The job's id in the phase store; default a new one.

    Returns
    -------
    TrainResult
        ``split`` holds the record: ``fit`` (``split`` | ``sampled``), rows, slices, left out, the
        note, the phases and their wall times.

    Raises
    ------
    SplitTrainingError
        A phase was claimed by another runner (nothing is registered twice).
    """
    cfg = project.training
    spark = runtime.spark()
    store = runtime.phase_store()
    job = job_id or f"train-{uuid.uuid4().hex[:12]}"
    fault = _fault()
    source = runtime.spark_source(cfg.data.table, version=fingerprint.source_version)
    coded = coded_rows(source, list(cfg.data.record_keys), salt=cfg.split.random_state,
                       holdout_fraction=cfg.split.holdout_fraction).persist()
    try:
        counts = {bool(r[HOLDOUT_COLUMN]): int(r["count"]) for r in coded.groupBy(HOLDOUT_COLUMN).count().collect()}
        plan = plan_split(counts.get(False, 0), max_rows=cfg.max_rows or 0, enabled=cfg.split_training.enabled,
                          min_rows_per_worker=cfg.split_training.min_rows_per_worker,
                          workers=_workers(spark, cfg.split_training.max_workers))
        _claim(store, job, "search", None)
        search = _search(project, coded, plan)
        store.finish(job, "search", {"training_rows": plan.training_rows, "sampled_rows": search.sampled_rows,
                                     "holdout_rows": len(search.holdout), "metrics": search.metrics})
        model, evidence, record = _split_or_sampled(project, coded, plan, search, store, job, fault)
    finally:
        coded.unpersist()
    _claim(store, job, "register", "search")
    record["phases"] = [{"phase": p["phase"], "state": p["state"]} for p in store.phases(job)]
    record["job"] = job
    result = register(project, runtime.mlflow(), model, evidence=evidence, metrics=search.metrics,
                      training=search.training, holdout=search.holdout, fingerprint=fingerprint, features=features,
                      note=f"trained: {note}; {record['note']}", split=record, description=record["note"])
    store.finish(job, "register", {"version": result.version})
    return result


def _claim(store: Any, job: str, phase: str, after: str | None) -> None:
    if not store.claim(job, phase, after=after):
        raise SplitTrainingError(f"split training job {job}: phase {phase!r} was claimed by another runner (or "
                                 f"{after!r} has not finished); this runner stops. Look at that runner's result, or "
                                 "start a new job", job=job, phase=phase)


def _search(project: ProjectConfig, coded: Any, plan: SplitPlan) -> Search:
    """Phase 1: the sample of ``max_rows`` training rows and up to ``max_rows`` holdout rows onto the
    driver; recipe, model and threshold fitted and measured as for a table that fits."""
    from pyspark.sql import functions as F

    cfg = project.training
    started = time.perf_counter()
    with progress.step(f"train: sample {cfg.max_rows:,} of {plan.training_rows:,} rows and the holdout"):
        taken = [arrow_frame(coded.filter(F.col(HOLDOUT_COLUMN) == held).orderBy("_order_code")
                             .limit(cfg.max_rows).toArrow()) for held in (False, True)]
    rows = pd.concat(taken, ignore_index=True)
    frame, y, pre = prepare_rows(project, rows.drop(columns=list(CODE_COLUMNS)))
    held = frame.pop(HOLDOUT_COLUMN).to_numpy(dtype=bool)
    training, holdout, truth = frame[~held], frame[held], y[held]
    with progress.step("train: search (fit recipe and model on the sample)", total=len(training)) as shown:
        chain = fit_project_chain(project, training, y[~held], pre)
        shown.total_rows(len(training))
        chain = with_threshold(chain, cfg.model.threshold if cfg.model else None, holdout, truth,
                               shown=project.shown("training"))
    return Search(chain, PreSplit(pre.steps, pre.skipped, pd.Index([])), training, holdout, truth,
                  holdout_metrics(chain, holdout, truth), len(taken[0]),
                  {"search_s": round(time.perf_counter() - started, 3)})


def _split_or_sampled(project: ProjectConfig, coded: Any, plan: SplitPlan, search: Search, store: Any, job: str,
                      fault: Fault | None) -> tuple[FittedChain | PastingEnsemble, dict[str, Any], dict[str, Any]]:
    """Phases 2 and 3, or the sampled fit with the reason it stands."""
    record: dict[str, Any] = {"training_rows": plan.training_rows, "max_rows": project.training.max_rows,
                              "seconds": dict(search.seconds)}
    if not plan.splits:
        return _sampled(search, record, plan.refused)
    _claim(store, job, "refit", "search")
    started = time.perf_counter()
    try:
        members, slices = _refit(project, coded, plan, search.pre, fault)
    except Exception as err:  # the Spark job itself failed: no worker finished a slice
        return _sampled(search, record, f"no worker finished a slice, the refit job failed "
                                        f"({type(err).__name__}: {_first_line(err)})")
    record["seconds"]["refit_s"] = round(time.perf_counter() - started, 3)
    failed = {s["slice"]: s["error"] for s in slices if s["error"]}
    store.finish(job, "refit", {"slices": len(slices), "failed": len(failed)})
    if not members:
        return _sampled(search, record, "every slice failed (" + "; ".join(f"slice {k}: {v}" for k, v in
                                                                           sorted(failed.items())) + ")")
    _claim(store, job, "assemble", "refit")
    started = time.perf_counter()
    try:
        ensemble, evidence, compared = _assemble(members, slices, search, fault)
    except Exception as err:  # admission refused the paste, it was worse, or it could not be built
        return _sampled(search, record, f"assembling the {len(members)} slice chains failed "
                                        f"({type(err).__name__}: {_first_line(err)})")
    record["seconds"]["assemble_s"] = round(time.perf_counter() - started, 3)
    store.finish(job, "assemble", {"members": len(members)})
    coverage = ensemble.coverage
    return ensemble, evidence, {**record, "fit": "split", **coverage, "failed_slices": failed,
                                "split_holdout_metrics": compared}


def _sampled(search: Search, record: dict[str, Any], why: str) -> tuple[FittedChain, dict[str, Any], dict[str, Any]]:
    """The search's model, admitted, with the note saying it is the sampled fit and why."""
    note = SAMPLED_NOTE.format(fitted=search.sampled_rows, rows=record["training_rows"], why=why)
    evidence = admit(search.chain, search.holdout)
    return search.chain, evidence, {**record, "fit": "sampled", "rows": search.sampled_rows, "slices": 0,
                                    "left_out": record["training_rows"] - search.sampled_rows, "note": note}


def _refit(project: ProjectConfig, coded: Any, plan: SplitPlan, pre: PreSplit,
           fault: Fault | None) -> tuple[list[tuple[str, FittedChain]], list[dict[str, Any]]]:
    """Phase 2: ``groupBy(_slice).applyInArrow(fit_slice)``; the slice chains and each slice's record."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    max_rows = cast(int, project.training.max_rows)
    schema = StructType([StructField("slice", LongType()), StructField("rows", LongType()),
                         StructField("fitted", LongType()), StructField("chain", BinaryType()),
                         StructField("error", StringType())])
    training = (coded.filter(~F.col(HOLDOUT_COLUMN))
                .withColumn(SLICE_COLUMN, slice_of(F.col("_slice_code"), plan.slices)))

    def fit(table: pa.Table) -> pa.Table:
        return fit_slice(project, pre, table, max_rows=max_rows, fault=fault).cast(RESULT_SCHEMA)

    with progress.step(f"train: refit {plan.slices} slices on the workers", total=plan.training_rows) as shown:
        results = training.groupBy(SLICE_COLUMN).applyInArrow(fit, schema).toArrow().to_pylist()
        shown.total_rows(sum(r["rows"] for r in results))
    members = [(f"slice_{r['slice']:02d}", pickle.loads(r["chain"])) for r in sorted(results, key=lambda r: r["slice"])
               if r["chain"] is not None]
    slices = [{k: r[k] for k in ("slice", "rows", "fitted", "error")} for r in sorted(results, key=lambda r: r["slice"])]
    return members, slices


def _assemble(members: list[tuple[str, FittedChain]], slices: list[dict[str, Any]], search: Search,
              fault: Fault | None) -> tuple[PastingEnsemble, dict[str, Any], dict[str, float]]:
    """Phase 3: paste, admit (every member, the whole) and compare with the sampled fit on its holdout.

    Raises
    ------
    SplitTrainingError
        The paste cannot be built, or it is worse than the sampled fit on the holdout.
    ProbeError
        Admission refused a member or the whole.
    """
    if fault == "assemble":
        raise SplitTrainingError("injected fault: the assemble phase could not run")
    fitted = sum(s["fitted"] for s in slices if not s["error"])
    left_out = sum(s["rows"] for s in slices) - fitted
    note = NOTE.format(slices=len(members), rows=fitted)
    if left_out:
        note += f"; the workers could not hold every row: {left_out:,} training rows were left out"
    coverage = {"rows": fitted, "slices": len(members), "left_out": left_out, "note": note + "."}
    ensemble = paste(members, threshold=search.chain.threshold, coverage=coverage)
    with progress.step("admission: every slice chain, then the paste", total=len(search.holdout)) as shown:
        evidence = admit_set(ensemble, search.holdout)
        shown.total_rows(len(search.holdout))
    compared = holdout_metrics(ensemble, search.holdout, search.truth)  # type: ignore[arg-type]
    key = "log_loss" if "log_loss" in compared else "rmse" if "rmse" in compared else None
    if key and compared[key] > search.metrics[key]:
        raise SplitTrainingError(f"the split fit's holdout {key} {compared[key]:.6g} is worse than the sampled fit's "
                                 f"{search.metrics[key]:.6g} on the same {int(compared['holdout_scored_rows']):,} "
                                 "rows; a fast answer worse than the slow one is not kept", metric=key)
    return ensemble, evidence, compared


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

