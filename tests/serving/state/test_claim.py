"""The endpoint file is claimed under the serving lock: one owner at a time (also when starts race),
removed only by its owner, and taken over from a process that is gone (or a reused pid)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import psutil
import pytest

from lakescore.errors import EndpointRunningError
from lakescore.serving.run import endpoint_file, read_endpoint
from lakescore.serving.state.claim import claim_endpoint, owner_alive, release_endpoint

RACE = """
import json, sys, time
from lakescore.errors import EndpointRunningError
from lakescore.serving.state.claim import claim_endpoint, release_endpoint
from lakescore.serving.run import read_endpoint
home = sys.argv[1]
wait_for_start()
try:
    mine = claim_endpoint(home, "ep", {"address": "http://127.0.0.1:9", "version": 1})
except EndpointRunningError as err:
    print(json.dumps({"refused_by": err.fields["pid"], "released": release_endpoint(home, "ep"), "message": str(err)}))
else:
    time.sleep(3)  # the others claim and give up while this one lives
    print(json.dumps({"claimed": mine["pid"], "still": read_endpoint(home, "ep")["pid"],
                      "released": release_endpoint(home, "ep")}))
"""


def test_of_four_starts_at_once_one_claims_the_endpoint_and_only_it_removes_the_file(tmp_path, at_once) -> None:
    done = at_once(RACE, [str(tmp_path)] * 4)
    assert [code for code, _, _ in done] == [0, 0, 0, 0], [err[-2000:] for _, _, err in done]
    answers = [json.loads(out) for _, out, _ in done]
    [winner] = [a for a in answers if "claimed" in a]
    losers = [a for a in answers if "refused_by" in a]
    assert len(losers) == 3
    assert winner["still"] == winner["claimed"] and winner["released"] is True
    for loser in losers:
        assert loser["refused_by"] == winner["claimed"] and loser["released"] is False
        assert (f"endpoint 'ep' is already served from {tmp_path} by process {winner['claimed']} at "
                "http://127.0.0.1:9 (version 1)") in loser["message"]
    assert not endpoint_file(tmp_path, "ep").exists()


def test_a_live_owner_is_refused_with_its_pid_and_address(tmp_path) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record = {"address": "http://127.0.0.1:9", "version": 3, "pid": live.pid, "host": socket.gethostname(),
                  "process_started": psutil.Process(live.pid).create_time()}
        endpoint_file(tmp_path, "ep").parent.mkdir(parents=True)
        endpoint_file(tmp_path, "ep").write_text(json.dumps(record))
        with pytest.raises(EndpointRunningError) as caught:
            claim_endpoint(tmp_path, "ep", {"address": "http://127.0.0.1:10", "version": 3})
        assert caught.value.code == "endpoint_running" and caught.value.http_status == 409
        assert f"by process {live.pid} at http://127.0.0.1:9 (version 3)" in str(caught.value)
        assert f"Stop that one first (SIGTERM to {live.pid})" in str(caught.value)
        assert release_endpoint(tmp_path, "ep") is False  # not ours: left alone
        assert read_endpoint(tmp_path, "ep") == record
    finally:
        live.kill()
        live.wait()


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


@pytest.mark.parametrize("left_by", ["a process that is gone", "a reused pid", "an older record, process gone"])
def test_a_record_whose_owner_is_gone_is_taken_over(tmp_path, left_by) -> None:
    me = psutil.Process()
    records = {
        "a process that is gone": {"pid": dead_pid(), "host": socket.gethostname(), "process_started": 1.0},
        "a reused pid": {"pid": os.getppid(), "host": socket.gethostname(), "process_started": me.create_time() + 60},
        "an older record, process gone": {"pid": dead_pid()},  # as lakescore wrote it before owner fields
    }
    stale = {"address": "http://127.0.0.1:9", "version": 1, **records[left_by]}
    assert owner_alive(stale) is False
    endpoint_file(tmp_path, "ep").parent.mkdir(parents=True)
    endpoint_file(tmp_path, "ep").write_text(json.dumps(stale))
    claim_endpoint(tmp_path, "ep", {"address": "http://127.0.0.1:10", "version": 2})
    assert read_endpoint(tmp_path, "ep")["pid"] == os.getpid()
    assert release_endpoint(tmp_path, "ep") is True and not endpoint_file(tmp_path, "ep").exists()


def test_a_record_of_another_host_is_alive_while_its_address_answers(tmp_path) -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    address = f"http://127.0.0.1:{listening.getsockname()[1]}"
    record = {"address": address, "pid": 1, "host": "another-driver", "process_started": 1.0}
    assert owner_alive(record) is True
    listening.close()
    assert owner_alive(record) is False
