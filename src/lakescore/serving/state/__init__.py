"""What an endpoint keeps: its SQLite state, its prediction records, and who owns it.

- ``store``: token, audit events, replicas and idempotent replies in SQLite under the runtime home;
- ``recorder``: buffered prediction records for the Delta inference table;
- ``claim``: which process owns a running endpoint (its endpoint file, under the serving lock).
"""
