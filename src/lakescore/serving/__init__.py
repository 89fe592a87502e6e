"""Warm endpoints: a pinned, certified version held in memory and answered over HTTP.

Every answer comes from ``FittedChain.predict`` inside the same pyfunc that batch scoring loads
(``mlflow.pyfunc.load_model("models:/<name>/<version>")``, whose ``load_context`` re-verifies the
certificate). Modules, one idea each:

- ``wire``: request parsing and validation, JSON replies with nulls;
- ``channel``: length-prefixed frames between the endpoint and a copy over the copy's Unix socket;
- ``copy_app``: one copy's process (one model version, one request at a time, on its socket);
- ``backend``: the ``ReplicaBackend`` seam and the local process backend;
- ``preload``: what the fork server imports once, so copies share those pages;
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
- ``endpoint`` / ``endpoint_app`` / ``responses`` / ``run``: the endpoint (the facade over the parts
  above), its HTTP app, that app's replies, token check and body read, and its process (started by
  ``lakescore.workflows.serve``);
- ``plan``: what the endpoint serves (the resolved version, its input columns, the settings);
- ``model_serving``: config/serving.yml as a Databricks Model Serving endpoint config;
- ``client``: retries, hold header, idempotency keys and the token header for callers.
"""
