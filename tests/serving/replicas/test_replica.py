"""A replica's answers to its frames: the health answer says whether a score is running."""

from __future__ import annotations

import threading

import orjson

from lakescore.serving.replicas.channel import HEALTH
from lakescore.serving.replicas.replica import LoadedVersion, answer


class SlowModel:
    """Stands in for the pyfunc's python model: ``predict`` blocks until released."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def predict(self, context: object, frame: object) -> object:
        self.entered.set()
        self.release.wait(10)
        return frame


def test_the_health_answer_says_how_long_the_running_score_has_taken() -> None:
    loaded = LoadedVersion("models:/m/1", 1)
    loaded.state, loaded.model = "ready", SlowModel()
    code, body = answer(loaded, HEALTH, b"")
    assert code == 200 and orjson.loads(body)["scoring_s"] is None  # idle
    scoring = threading.Thread(target=loaded.score, args=("frame",))
    scoring.start()
    assert loaded.model.entered.wait(10)
    code, body = answer(loaded, HEALTH, b"")
    assert code == 200 and orjson.loads(body)["scoring_s"] >= 0
    loaded.model.release.set()
    scoring.join(10)
    assert orjson.loads(answer(loaded, HEALTH, b"")[1])["scoring_s"] is None
