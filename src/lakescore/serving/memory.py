"""How much memory an endpoint's processes hold: resident (RSS) and proportional (PSS) memory.

RSS counts every page a process has mapped, so pages it shares with other processes (the imports a
copy shares with the fork server it was forked from) are counted again in each of them: a sum of
RSS over processes double-counts. PSS gives each process its unique pages plus an even share of
each shared page, so a sum of PSS over the processes is what they cost the machine together. Both
come from ``/proc/<pid>/smaps_rollup`` (Linux 4.14+), one small read per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

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


def footprint(*, endpoint: int | None, fork_server: int | None, copies: Iterable[int | None]) -> dict[str, Any]:
    """The memory of an endpoint's processes: the endpoint process, its fork server and each copy.

    Parameters
    ----------
    endpoint, fork_server : int or None
        Process ids (None: not running, reported as None).
    copies : iterable of int or None
        Process ids of the copies (unknown or gone ones are left out).

    Returns
    -------
    dict
        ``endpoint``, ``fork_server`` (``{"pid", "rss_mb", "pss_mb"}`` or None), ``copies`` (a list
        of them), and ``total_pss_mb`` (the sum of PSS: what the processes cost the machine
        together) and ``total_rss_mb`` (the sum of RSS, which counts shared pages once per process).
    """
    ep = process_memory(endpoint) if endpoint else None
    fs = process_memory(fork_server) if fork_server else None
    found = [m for m in (process_memory(pid) for pid in copies if pid) if m is not None]
    every = [m for m in (ep, fs, *found) if m is not None]
    return {"endpoint": ep.summary() if ep else None, "fork_server": fs.summary() if fs else None,
            "copies": [m.summary() for m in found],
            "total_pss_mb": round(sum(m.pss_bytes for m in every) / MB, 1),
            "total_rss_mb": round(sum(m.rss_bytes for m in every) / MB, 1)}
