"""Which process owns a running endpoint: its endpoint file is claimed and removed under the serving lock.

``<home>/serving/endpoints/<name>.json`` names the process that serves the endpoint (``pid``,
``host``, ``process_started``: the process's start time, so a reused pid is not taken for it) and
its address. :func:`claim_endpoint` writes it under the serving lock
(``<home>/serving/endpoints.lock``, :func:`lakescore.locking.exclusive`) only when no live process
holds it: a second ``lakescore serve`` of the same endpoint on the same home, also one started in
the same second, is refused with :class:`~lakescore.errors.EndpointRunningError` naming the
running one's pid and address; a record left by a process that is gone (killed with SIGKILL) is
taken over. :func:`release_endpoint` removes the file only while it still names this process.

A record written on another host (a home on a shared volume) cannot be checked by pid: its owner
counts as alive while its address accepts a connection.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil

from lakescore.errors import EndpointRunningError
from lakescore.locking import exclusive
from lakescore.serving.run import endpoint_file, read_endpoint

START_TIME_TOLERANCE_S = 1.0  # psutil's create_time is exact to the clock tick; a reused pid starts later
PROBE_TIMEOUT_S = 1.0


def serving_lock(home: str | Path) -> Any:
    """The serving lock of ``home``: held while an endpoint file is checked and written or removed."""
    return exclusive(Path(home) / "serving" / "endpoints.lock")


def this_process() -> dict[str, Any]:
    """The owner fields of an endpoint record for this process: ``pid``, ``host``, ``process_started``."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "process_started": psutil.Process().create_time()}


def owner_alive(record: dict[str, Any]) -> bool:
    """Whether the process an endpoint record names still runs.

    On this host: its pid runs, is not a zombie, and started when the record says (within
    ``START_TIME_TOLERANCE_S`` seconds; a record without ``process_started`` is checked by pid alone).
    On another host: its address accepts a TCP connection within ``PROBE_TIMEOUT_S`` seconds.
    """
    host = record.get("host")
    if host is not None and host != socket.gethostname():
        return _answers(str(record.get("address", "")))
    try:
        proc = psutil.Process(int(record["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = proc.create_time()
    except (psutil.NoSuchProcess, KeyError, TypeError, ValueError):
        return False
    recorded = record.get("process_started")
    return recorded is None or abs(started - float(recorded)) <= START_TIME_TOLERANCE_S


def _is_mine(record: dict[str, Any]) -> bool:
    me = this_process()
    return record.get("pid") == me["pid"] and record.get("host", me["host"]) == me["host"] and owner_alive(record)


def _answers(address: str) -> bool:
    parsed = urlparse(address)
    if not parsed.hostname or not parsed.port:
        return False
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def running(home: str | Path, name: str) -> dict[str, Any] | None:
    """The record of endpoint ``name`` on ``home`` when another live process serves it, else None."""
    record = _read(home, name)
    if record is None or _is_mine(record) or not owner_alive(record):
        return None
    return record


def refuse_if_running(home: str | Path, name: str) -> None:
    """Raise when another live process serves endpoint ``name`` from ``home`` (an early check,
    before planning; :func:`claim_endpoint` decides under the lock).

    Raises
    ------
    EndpointRunningError
        Naming the running process's pid and address.
    """
    record = running(home, name)
    if record is not None:
        raise _refusal(home, name, record)


def claim_endpoint(home: str | Path, name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Write the endpoint file of ``name`` for this process, under the serving lock, unless a live
    process holds it.

    Parameters
    ----------
    home : str or Path
        The runtime home.
    name : str
        The endpoint's name (``endpoint_name`` in serving.yml).
    fields : dict
        What clients read: ``address``, ``url``, ``version``, ``token_file``; the owner fields
        (:func:`this_process`) are added.

    Returns
    -------
    dict
        The record written.

    Raises
    ------
    EndpointRunningError
        Another live process's record is there (a record of a process that is gone is replaced).
    """
    record = {**fields, **this_process()}
    where = endpoint_file(home, name)
    where.parent.mkdir(parents=True, exist_ok=True)
    with serving_lock(home):
        held = running(home, name)
        if held is not None:
            raise _refusal(home, name, held)
        partial = where.with_name(f".{where.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(record))
        partial.replace(where)  # readers never see a half-written file
    return record


def release_endpoint(home: str | Path, name: str) -> bool:
    """Remove the endpoint file of ``name`` if it still names this process (under the serving lock).

    Returns
    -------
    bool
        Whether it was removed (False: it is gone, or another process's).
    """
    with serving_lock(home):
        record = _read(home, name)
        if record is None or not _is_mine(record):
            return False
        endpoint_file(home, name).unlink(missing_ok=True)
        return True


def _read(home: str | Path, name: str) -> dict[str, Any] | None:
    """The endpoint record, or None when there is none or it cannot be read (a record nobody owns)."""
    try:
        record = read_endpoint(home, name)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _refusal(home: str | Path, name: str, record: dict[str, Any]) -> EndpointRunningError:
    pid, address = record.get("pid"), record.get("address")
    host = record.get("host")
    where = f"process {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")
    return EndpointRunningError(
        f"endpoint {name!r} is already served from {home} by {where} at {address} (version "
        f"{record.get('version')}); a second `lakescore serve` of it would take its endpoint file and replica "
        f"rows. Stop that one first (SIGTERM to {pid}), redeploy it with `lakescore serve --deploy N`, or "
        "serve this one under another endpoint_name.", endpoint=name, pid=pid, address=address)
