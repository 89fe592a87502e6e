"""The Spark Delta writer on a single-node run, for the fault tests: what ``lakescore publish`` does
with a Spark run (workflows/publish.publish), for a run scored in pandas (the publication lake's),
with the commit loop's fault hook and the writer class as parameters; and, with ``one_pass``, what
``lakescore score --publish`` does on the Spark route (:func:`one_pass_rows`).

Run as a script (``python spark_route.py HOME CONFIG_DIR RUN_ID [one-pass]``) it publishes a staged
run in a process of its own, with its own SparkSession, and prints the result as JSON: the fault
tests kill it at the writer's fault hook (``LAKESCORE_FAULT_PAUSE``), or, on the one pass, inside
the pass itself (the point ``one_pass``, on the Python worker that hands the rows to the commit).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from lakescore.publish import delta_rs
from lakescore.publish.commit import fault_pause, publish_once
from lakescore.publish.plan import Scope
from lakescore.publish.run import PublishResult, arrow_facts, checked_facts, saved_facts
from lakescore.publish.spark_delta import SparkDeltaWriter, check_keys_within
from lakescore.scoring.run import OnePass
from lakescore.scoring.spark import observe_tally
from lakescore.transport_codes import STATUSES
from lakescore.workflows.publish import build_request

SOURCE = "main.flights.flights_incoming"


def one_pass_rows(runtime: Any, run: Any, data: Any, *, keys: list[str], period_column: str | None) -> tuple[Any, OnePass, Any]:
    """The one pass of the Spark route for a run scored in pandas: the rows scored are read from
    the source on Spark (the planned snapshot, or the window's inserted rows) and pass through a
    Python worker to the commit (their predictions, ``data``, joined on the way: the pandas
    chain stands in for the UDF); the keys checked and the facts counted on that source read,
    the tally observed by the commit. Returns the rows, the :class:`OnePass` and the facts."""
    spark, scope = runtime.spark(), Scope.from_json(run.scope)
    if scope.read == "cdf":
        changes = runtime.spark_changes(SOURCE, first=int(scope.source_version_from), last=int(scope.source_version_to),
                                        columns=list(dict.fromkeys([*keys, *([period_column] if period_column else [])])))
        source = changes.where("_change_type = 'insert'").drop("_change_type")
    else:
        source = runtime.spark_source(SOURCE, version=run.plan.source_version)
    columns = list(dict.fromkeys([*keys, *([period_column] if period_column in source.columns else [])]))
    checked = check_keys_within(source.select(*columns), keys, period_column=period_column)
    def passing(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """The rows on their way from the source read to the commit, on a Python worker (as the
        UDF's are), with the fault hook ``one_pass`` before the first batch (a local function:
        pickled by value, the workers cannot import this file)."""
        fault_pause("one_pass")
        yield from batches

    predictions = spark.createDataFrame(data)
    joined = source.select(*keys).join(predictions, on=keys)
    reasons = tuple(sorted(set(run.predictions["exclusion_reason"].dropna())))
    rows, tally = observe_tally(joined.mapInPandas(passing, joined.schema),
                                {"scoring_status": STATUSES, "exclusion_reason": reasons})
    facts = saved_facts(rows, checked_facts(rows, checked.totals, period_column), period_column)
    return rows, OnePass(checked, tally), facts


def publish_spark(project: Any, runtime: Any, run: Any, *, migrate: bool = False,
                  pause: Callable[[str], None] = fault_pause, writer: type = SparkDeltaWriter,
                  one_pass: bool = False) -> PublishResult:
    """Publish ``run`` with ``writer`` (a :class:`SparkDeltaWriter`) on ``runtime.spark()``; with
    ``one_pass``, as ``score --publish`` does (:func:`one_pass_rows`) when the run has rows."""
    inf, plan = project.inference, run.plan
    column = inf.publication.period_column
    data = delta_rs.to_arrow(run.predictions, run_id=run.run_id)
    one_pass = one_pass and data.num_rows > 0 and Scope.from_json(run.scope).action != "noop"
    if one_pass:
        frame, one, facts = one_pass_rows(runtime, run, data, keys=list(plan.record_keys), period_column=column)
        counts: dict[str, Any] = {"rows_in": facts.rows}
        options: dict[str, Any] = {"checked": one.checked, "complete": one.complete}
    else:
        facts, counts, options = arrow_facts(data, column), run.counts, {}
    request = build_request(project, run, facts, target=runtime.target)
    if request.action == "noop":
        version = runtime.table_version(inf.prediction_table) if runtime.table_exists(inf.prediction_table) else None
        return PublishResult(inf.prediction_table, "noop", Scope.from_json(run.scope).reason, version, None,
                             "spark-delta")
    if not one_pass:
        frame = runtime.spark().createDataFrame(data)
    decision, version, receipt = publish_once(
        writer(str(runtime.table_path(inf.prediction_table)), frame, table=inf.prediction_table, app_id=request.app_id,
               facts=facts if one_pass else None, checked=options.pop("checked", None)),
        request, allow_empty=inf.publication.allow_empty, model_change_mode=inf.publication.model_change_mode,
        migrate=migrate, period_column=column, keys=list(plan.record_keys), pause=pause,
        read=Scope.from_json(run.scope).read, certificate_sha256=plan.certificate_sha256,
        decision_threshold=plan.decision_threshold or None, **counts,
        batch_compute="spark", env_manager=run.env_manager, batch_rows=run.batch_rows, **options)
    return PublishResult(inf.prediction_table, decision.action, decision.message, version, receipt, "spark-delta")


if __name__ == "__main__":
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.score import load_scored

    home, config_dir, run_id = sys.argv[1:4]
    runtime = LocalRuntime(home)
    print(json.dumps(publish_spark(load_project(config_dir), runtime, load_scored(runtime, run_id),
                                   one_pass=sys.argv[4:5] == ["one-pass"]).summary()))
