"""How much memory an endpoint's processes hold: resident (RSS) and proportional (PSS) memory.

RSS counts every page a process has mapped, so pages it shares with other processes (the imports a
replica shares with the fork server it was forked from) are counted again in each of them: a sum of
RSS over processes double-counts. PSS gives each process its unique pages plus an even share of
each shared page, so a sum of PSS over the processes is what they cost the machine together. Both
come from ``/proc/<pid>/smaps_rollup`` (Linux 4.14+), one small read per process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 2**20


@dataclass(frozen=True)
class ProcessMemory:
    """One process's memory (bytes).

    Attributes
    ----------
    pid : int
    rss_bytes : int
        Resident pages, shared ones counted in full.
    pss_bytes : int
        Unique pages plus an even share of shared ones.
    """

    pid: int
    rss_bytes: int
    pss_bytes: int

    def summary(self) -> dict[str, Any]:
        """``{"pid", "rss_mb", "pss_mb"}`` (MB of 2**20 bytes, one decimal)."""
        return {"pid": self.pid, "rss_mb": round(self.rss_bytes / MB, 1), "pss_mb": round(self.pss_bytes / MB, 1)}


def process_memory(pid: int) -> ProcessMemory | None:
    """RSS and PSS of process ``pid`` from ``/proc/<pid>/smaps_rollup``, or None when the process is
    gone or cannot be read."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss"):
            fields[key] = int(rest.split()[0]) * 1024  # the kernel writes kB
    if len(fields) < 2:
        return None
    return ProcessMemory(pid, fields["Rss"], fields["Pss"])


def footprint(*, endpoint: int | None, fork_server: int | None, replicas: Iterable[int | None],
              feature_holders: Iterable[int | None] = (), others_under: int | None = None) -> dict[str, Any]:
    """The memory of an endpoint's processes: the endpoint process, its fork server, the feature
    holders of lookup versions (:mod:`lakescore.serving.replicas.feature_holder`) and each replica.

    Parameters
    ----------
    endpoint, fork_server : int or None
        Process ids (None: not running, reported as None).
    replicas, feature_holders : iterable of int or None
        Process ids of the replicas and of the feature holders (unknown or gone ones are left out).
    others_under : int, optional
        A process (the endpoint's) whose descendants not named above are counted too, as
        ``other_processes`` (multiprocessing's resource tracker, a cold-path process that runs now).

    Returns
    -------
    dict
        ``endpoint``, ``fork_server`` (``{"pid", "rss_mb", "pss_mb"}`` or None), ``feature_holders``,
        ``replicas`` and ``other_processes`` (lists of them), and ``total_pss_mb`` (the sum of PSS over
        all of them: what the processes cost the machine together) and ``total_rss_mb`` (the sum of RSS, which counts
        shared pages once per process).
    """
    ep = process_memory(endpoint) if endpoint else None
    fs = process_memory(fork_server) if fork_server else None
    found = [m for m in (process_memory(pid) for pid in replicas if pid) if m is not None]
    holders = [m for m in (process_memory(pid) for pid in feature_holders if pid) if m is not None]
    named = {m.pid for m in (ep, fs, *holders, *found) if m is not None}
    others = [m for m in (process_memory(pid) for pid in _descendants(others_under) if pid not in named)
              if m is not None]
    every = [m for m in (ep, fs, *holders, *found, *others) if m is not None]
    return {"endpoint": ep.summary() if ep else None, "fork_server": fs.summary() if fs else None,
            "feature_holders": [m.summary() for m in holders], "replicas": [m.summary() for m in found],
            **({"other_processes": [m.summary() for m in others]} if others_under else {}),
            "total_pss_mb": round(sum(m.pss_bytes for m in every) / MB, 1),
            "total_rss_mb": round(sum(m.rss_bytes for m in every) / MB, 1)}


def _descendants(pid: int | None) -> list[int]:
    """Process ids of every descendant of ``pid`` (none when it is None or gone)."""
    if not pid:
        return []
    import psutil  # the serving extra; only the endpoint's /status asks

    try:
        return sorted(p.pid for p in psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []
