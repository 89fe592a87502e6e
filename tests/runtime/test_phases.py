"""Phase hand-over: each phase is claimed exactly once, and only after the one before it finished."""

import threading

import pytest

from lakescore.errors import ConfigError
from lakescore.runtime.phases import DeltaPhaseStore, SqlitePhaseStore


def _race(store, job, n=2):
    """``n`` threads finish ``refit`` (claimed once) and claim ``assemble`` at the same moment."""
    assert store.claim(job, "search") and store.finish(job, "search", {"rows": 10})
    assert store.claim(job, "refit", after="search")
    gate, results = threading.Barrier(n), [None] * n

    def finisher(i):
        gate.wait()
        finished = store.finish(job, "refit", {"by": i})
        results[i] = (finished, store.claim(job, "assemble", after="refit"))

    threads = [threading.Thread(target=finisher, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_two_concurrent_finishers_hand_the_phase_over_exactly_once(tmp_path):
    store = SqlitePhaseStore(tmp_path / "phases.db")
    for attempt in range(20):  # many races: a lost update would show in one of them
        results = _race(store, f"job-{attempt}", n=4)
        assert sum(finished for finished, _ in results) == 1
        assert sum(claimed for _, claimed in results) == 1
    phases = store.phases("job-0")
    assert [(p["phase"], p["state"]) for p in phases] == [("search", "finished"), ("refit", "finished"),
                                                          ("assemble", "claimed")]
    assert phases[0]["record"] == {"rows": 10}


def test_a_phase_is_not_claimed_before_the_one_before_it_finished(tmp_path):
    store = SqlitePhaseStore(tmp_path / "phases.db")
    assert store.claim("j", "search")
    assert not store.claim("j", "refit", after="search")  # search claimed, not finished
    assert not store.finish("j", "refit", {})  # never claimed
    assert store.finish("j", "search", {}) and not store.finish("j", "search", {"again": 1})
    assert store.claim("j", "refit", after="search") and not store.claim("j", "refit", after="search")
    assert SqlitePhaseStore(tmp_path / "phases.db").phases("j")[0]["record"] == {}  # the first record stands


def test_a_name_with_sql_in_it_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="job and phase names are letters"):
        SqlitePhaseStore(tmp_path / "p.db").claim("j'; DROP TABLE phases; --", "search")


def test_the_delta_store_hands_over_once_on_local_spark(spark, tmp_path):
    store = DeltaPhaseStore(spark, f"delta.`{tmp_path / 'phases'}`")
    assert store.claim("j", "search") and not store.claim("j", "search")
    assert not store.claim("j", "refit", after="search")
    note = "it's done in C:\\runs\\${run}"  # a quote, backslashes and a Spark SQL variable mark, kept as written
    assert store.finish("j", "search", {"note": note}) and not store.finish("j", "search", {})
    results = _race(store, "k", n=2)
    assert sum(claimed for _, claimed in results) == 1
    assert store.phases("j")[0]["record"] == {"note": note}


def test_the_delta_store_claims_two_jobs_at_once_on_local_spark(spark, tmp_path):
    """Two jobs claim their first phase at the same moment: each gets its claim (a merge of the
    whole table conflicts with the other job's merge, and the loser must not lose its claim)."""
    store = DeltaPhaseStore(spark, f"delta.`{tmp_path / 'phases'}`")
    for attempt in range(2):
        gate, results = threading.Barrier(2, timeout=120), {}

        def claimer(job, gate=gate, results=results):
            gate.wait()
            results[job] = store.claim(job, "search")

        threads = [threading.Thread(target=claimer, args=(f"job-{attempt}-{i}",)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {f"job-{attempt}-0": True, f"job-{attempt}-1": True}
