"""RSS and PSS of real processes: memory a process writes shows in both; pages shared after a fork
count in full in each RSS but are split in PSS; the footprint sums PSS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from lakescore.serving.replicas.memory import MB, footprint, process_memory

SIZE_MB = 200

# Writes SIZE_MB of non-zero bytes when told to ("grow"), or forks first and keeps the pages shared
# ("fork": the child only sleeps, so the kernel replicas none of them).
HOLDER = textwrap.dedent(f"""
    import os, sys, time
    mode = sys.argv[1]
    print(os.getpid(), flush=True)
    sys.stdin.readline()
    block = b"\\x01" * ({SIZE_MB} * 2**20)
    if mode == "fork":
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print(child, flush=True)
    else:
        print(0, flush=True)
    sys.stdin.readline()
""")


@pytest.fixture
def holder(request: pytest.FixtureRequest):
    procs = []

    def start(mode: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def step(proc: subprocess.Popen[str]) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    return int(proc.stdout.readline())


def test_memory_a_process_writes_shows_in_its_rss_and_pss(holder) -> None:
    proc = holder("grow")
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    before = process_memory(pid)
    step(proc)
    after = process_memory(pid)
    assert before is not None and after is not None
    assert after.pid == pid
    assert abs((after.rss_bytes - before.rss_bytes) / MB - SIZE_MB) < 0.1 * SIZE_MB
    assert abs((after.pss_bytes - before.pss_bytes) / MB - SIZE_MB) < 0.1 * SIZE_MB


def test_pages_shared_after_a_fork_count_in_each_rss_but_are_split_in_pss(holder) -> None:
    proc = holder("fork")
    assert proc.stdout is not None
    parent = int(proc.stdout.readline())
    child = step(proc)
    mem = {pid: process_memory(pid) for pid in (parent, child)}
    for m in mem.values():
        assert m is not None and m.rss_bytes / MB > SIZE_MB  # each RSS holds the whole block
        assert m.pss_bytes < m.rss_bytes
    both_pss = sum(m.pss_bytes for m in mem.values()) / MB  # type: ignore[union-attr]
    both_rss = sum(m.rss_bytes for m in mem.values()) / MB  # type: ignore[union-attr]
    assert both_rss - both_pss > 0.9 * SIZE_MB  # the block once in the PSS sum, twice in the RSS sum
    assert all(m.pss_bytes / MB > SIZE_MB / 2 * 0.9 for m in mem.values())  # type: ignore[union-attr]

    fp = footprint(endpoint=os.getpid(), fork_server=parent, replicas=[child, None, 2**22 + 1])
    assert fp["fork_server"]["pid"] == parent and [c["pid"] for c in fp["replicas"]] == [child]  # gone pids left out
    parts = [fp["endpoint"], fp["fork_server"], *fp["replicas"]]
    assert fp["total_pss_mb"] == pytest.approx(sum(p["pss_mb"] for p in parts), abs=0.5)
    assert fp["total_rss_mb"] == pytest.approx(sum(p["rss_mb"] for p in parts), abs=0.5)


def test_a_process_that_is_gone_has_no_memory() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert process_memory(proc.pid) is None
    assert footprint(endpoint=None, fork_server=proc.pid, replicas=[]) == {
        "endpoint": None, "fork_server": None, "feature_holders": [], "replicas": [], "total_pss_mb": 0.0,
        "total_rss_mb": 0.0}
