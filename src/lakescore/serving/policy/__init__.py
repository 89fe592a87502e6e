"""What an endpoint decides: where a request goes, how many replicas run, which candidate serves.

- ``routing``: the pure rule of where a request goes (warm, candidate, hold, queue, cold, reject);
- ``scaler`` / ``autoscaler``: the pure scaling decision, and the loop that feeds and acts on it;
- ``candidates``: the chosen candidate, its shadow, canary and mirroring;
- ``shadow`` / ``canary``: candidate comparison and the automatic rollback rule;
- ``health``: one pass over every replica's status, and what is done about a failed one;
- ``stale``: whether the endpoint serves an older version than its alias names.
"""
