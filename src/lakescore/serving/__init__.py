"""Warm endpoints: a pinned, certified version held in memory and answered over HTTP.

Every answer comes from ``FittedChain.predict`` inside the same pyfunc that batch scoring loads
(``mlflow.pyfunc.load_model("models:/<name>/<version>")``, whose ``load_context`` re-verifies the
certificate). Modules, one idea each:

- ``wire``: request parsing and validation, JSON replies with nulls;
- ``app``: the FastAPI app of one copy (one process, one request at a time);
- ``backend``: the ``ReplicaBackend`` seam and the local process backend;
- ``pool``: the copies of an endpoint, the quietest-idle-copy rule, the bounded queue, start times;
- ``routing``: the pure rule of where a request goes (warm, candidate, hold, queue, cold, reject);
- ``scaler`` / ``autoscaler``: the pure scaling decision, and the loop that feeds and acts on it;
- ``candidates``: the chosen candidate, its shadow, canary and mirroring;
- ``shadow`` / ``canary``: candidate comparison and the automatic rollback rule;
- ``cold``: the cold path, a child of the fork server that scores as a batch job would;
- ``forkserver``: the preloaded fork server and the short jobs run in its children;
- ``memory``: RSS and PSS of the endpoint, its fork server and each copy;
- ``recorder`` / ``drift``: buffered prediction records for the Delta inference table;
- ``idempotency``: request digests that bind an ``Idempotency-Key`` to one request, and its claims;
- ``state``: token, audit events, copies and idempotent replies in SQLite under the runtime home;
- ``endpoint`` / ``endpoint_app`` / ``run``: the endpoint (the facade over the parts above), its
  HTTP app, and its process (started by ``lakescore.workflows.serve``);
- ``client``: retries, hold header and idempotency keys for callers.
"""
