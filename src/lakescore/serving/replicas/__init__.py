"""The replica processes of an endpoint: how they start, stop, talk, share pages and are counted.

- ``backend``: the ``ReplicaBackend`` seam and the local process backend;
- ``pool``: the replicas of an endpoint, the quietest-idle-replica rule, the bounded queue, start times;
- ``replica``: one replica's process (one model version, one request at a time, on its socket);
- ``channel``: length-prefixed frames between the endpoint and a replica over the replica's Unix socket;
- ``preload``: what the fork server (:mod:`lakescore.serving.forkserver`) imports once, so replicas share those pages;
- ``feature_holder``: the process that holds a lookup model's feature rows and forks its replicas;
- ``feature_generations``: which feature rows each version's replicas join;
- ``cold``: the cold path, a child of the fork server that scores as a batch job would;
- ``memory``: RSS and PSS of the endpoint, its fork server and each replica.
"""
