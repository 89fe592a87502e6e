"""The Spark Delta writer on a single-node run, for the fault tests: what ``lakescore publish`` does
with a Spark run (workflows/publish.publish), for a run scored in pandas (the publication lake's),
with the commit loop's fault hook and the writer class as parameters.

Run as a script (``python spark_route.py HOME CONFIG_DIR RUN_ID``) it publishes a staged run in a
process of its own, with its own SparkSession, and prints the result as JSON: the fault tests
kill it at the writer's fault hook (``LAKESCORE_FAULT_PAUSE``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from lakescore.publish import delta_rs
from lakescore.publish.commit import fault_pause, publish_once
from lakescore.publish.plan import Scope
from lakescore.publish.run import PublishResult, arrow_facts
from lakescore.publish.spark_delta import SparkDeltaWriter
from lakescore.workflows.publish import build_request


def publish_spark(project: Any, runtime: Any, run: Any, *, migrate: bool = False,
                  pause: Callable[[str], None] = fault_pause, writer: type = SparkDeltaWriter) -> PublishResult:
    """Publish ``run`` with ``writer`` (a :class:`SparkDeltaWriter`) on ``runtime.spark()``."""
    inf, plan = project.inference, run.plan
    data = delta_rs.to_arrow(run.predictions, run_id=run.run_id)
    request = build_request(project, run, arrow_facts(data, inf.publication.period_column), target=runtime.target)
    if request.action == "noop":
        version = runtime.table_version(inf.prediction_table) if runtime.table_exists(inf.prediction_table) else None
        return PublishResult(inf.prediction_table, "noop", Scope.from_json(run.scope).reason, version, None,
                             "spark-delta")
    frame = runtime.spark().createDataFrame(data)
    decision, version, receipt = publish_once(
        writer(str(runtime.table_path(inf.prediction_table)), frame, table=inf.prediction_table, app_id=request.app_id),
        request, allow_empty=inf.publication.allow_empty, model_change_mode=inf.publication.model_change_mode,
        migrate=migrate, period_column=inf.publication.period_column, keys=list(plan.record_keys), pause=pause,
        read=Scope.from_json(run.scope).read, certificate_sha256=plan.certificate_sha256,
        decision_threshold=plan.decision_threshold or None, **run.counts,
        batch_compute="spark", env_manager=run.env_manager, batch_rows=run.batch_rows)
    return PublishResult(inf.prediction_table, decision.action, decision.message, version, receipt, "spark-delta")


if __name__ == "__main__":
    from lakescore.config import load_project
    from lakescore.runtime import LocalRuntime
    from lakescore.workflows.score import load_scored

    home, config_dir, run_id = sys.argv[1:4]
    runtime = LocalRuntime(home)
    print(json.dumps(publish_spark(load_project(config_dir), runtime, load_scored(runtime, run_id)).summary()))
