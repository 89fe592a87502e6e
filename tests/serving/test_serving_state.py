"""Token, audit, resident copies and kept replies under the runtime home."""

from __future__ import annotations

import stat
import subprocess
import sys

from lakescore.serving.state import ServingState, ensure_token


def test_the_token_is_made_once_and_private(tmp_path) -> None:
    token = ensure_token(tmp_path)
    path = tmp_path / "serving" / "token"
    assert len(token) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_token(tmp_path) == token


def test_audit_copies_and_replies_round_trip(tmp_path) -> None:
    state = ServingState(tmp_path)
    state.audit("ml.scale", "ep", action="up", copies_after=2)
    assert [(e.event, e.endpoint, e.detail) for e in state.events("ml.scale")] == [
        ("ml.scale", "ep", {"action": "up", "copies_after": 2})]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        state.add_copy("gone", endpoint="ep", role="serve", version=1, pid=dead.pid, address=None)
        state.add_copy("here", endpoint="other", role="candidate", version=2, pid=live.pid, address="x")
        assert [c["copy_id"] for c in state.resident_copies()] == ["here"]
    finally:
        live.kill()
        live.wait()
    state.save_reply("ep", "k1", 200, b'{"a":1}')
    assert state.saved_reply("ep", "k1", max_age_s=60) == (200, b'{"a":1}')
    assert state.saved_reply("other", "k1", max_age_s=60) is None
    state.forget_replies(older_than_s=-1)
    assert state.saved_reply("ep", "k1", max_age_s=60) is None
    state.close()


FIRST_START = """
import sys
from lakescore.serving.state import ServingState, ensure_token
wait_for_start()
state = ServingState(sys.argv[1])
state.audit("ml.scale", "ep", action="up")
print(ensure_token(sys.argv[1]))
"""


def test_four_first_starts_at_once_share_one_token_and_one_database(tmp_path, at_once) -> None:
    done = at_once(FIRST_START, [str(tmp_path)] * 4)
    assert [code for code, _, _ in done] == [0, 0, 0, 0], [err[-2000:] for _, _, err in done]
    tokens = {out.strip() for _, out, _ in done}
    assert tokens == {(tmp_path / "serving" / "token").read_text().strip()}
    assert len(ServingState(tmp_path).events("ml.scale")) == 4
