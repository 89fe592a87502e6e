"""Warm endpoints: a pinned, certified version held in memory and answered over HTTP.

Every answer comes from ``FittedChain.predict`` inside the same pyfunc that batch scoring loads
(``mlflow.pyfunc.load_model("models:/<name>/<version>")``, whose ``load_context`` re-verifies the
certificate). Four rooms, and the endpoint that wires them together:

- ``http/``: the wire format, the app's replies, ``Idempotency-Key`` digests, the client;
- ``replicas/``: the replica processes (backend, pool, replica, channel, preload, feature
  holder, feature generations, cold path, memory);
- ``policy/``: the pure rules and the loops that apply them (routing, scaler and autoscaler,
  candidates, shadow, canary, health, stale);
- ``state/``: token, audit events, replicas and idempotent replies in SQLite; the prediction
  recorder; which process owns the endpoint.

Beside them, one idea each:

- ``endpoint`` / ``endpoint_app`` / ``run``: the endpoint (the facade over the parts above), its
  HTTP app, and its process (started by ``lakescore.workflows.serve``);
- ``deploy``: redeploying an endpoint to another version (``POST /deploy``);
- ``forkserver``: the preloaded fork server and the short jobs run in its children (replicas,
  cold-path scoring, registry reads for ``plan``);
- ``plan``: what the endpoint serves (the resolved version, its input columns, the settings);
- ``features``: what a lookup model's request carries, and the join a replica makes before the chain;
- ``drift``: the drift check recorded with each answered row;
- ``model_serving``: config/serving.yml as a Databricks Model Serving endpoint config.

Imports point down: ``endpoint_app`` → ``endpoint`` → ``deploy`` → ``policy`` → ``replicas`` →
``state`` → ``http``, with ``plan``, ``forkserver``, ``features`` and ``run`` below what uses them.
"""
