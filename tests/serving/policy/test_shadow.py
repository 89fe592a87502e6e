"""Shadow comparison: the tally and its sentence, then a real candidate replica mirrored after replies."""

from __future__ import annotations

import asyncio

import pytest
from serving_fakes import fake_endpoint, one_row, ready_replica
from serving_helpers import Trained, chain_of, expected_rows, ready_replicas, records

from lakescore.config import ServingConfig
from lakescore.errors import ServingConflictError
from lakescore.runtime import LocalRuntime
from lakescore.serving.policy.shadow import ShadowTally, check_comparable, compared_columns, rows_agree


def row(prediction: object) -> dict[str, object]:
    return {"prediction": prediction}


def test_classification_compares_labels_exactly_and_exclusions_agree_only_with_exclusions() -> None:
    agree = lambda a, b: rows_agree(row(a), row(b), task="classification", rtol=0.1, atol=1.0)  # noqa: E731
    assert agree(1, 1) and not agree(0, 1) and agree(None, None) and not agree(None, 0)


def test_regression_compares_within_atol_plus_rtol_of_the_served_value() -> None:
    agree = lambda cand, served: rows_agree(row(cand), row(served), task="regression", rtol=0.01, atol=0.5)  # noqa: E731
    assert agree(101.5, 100.0)  # |1.5| <= 0.5 + 0.01 * 100
    assert not agree(101.6, 100.0)


def test_below_100_rows_there_is_no_figure_and_the_sentence_says_how_many_more() -> None:
    tally = ShadowTally(3, 2, "classification", 0.0, 0.0)
    tally.add([row(1)] * 37, [row(1)] * 36 + [row(0)], request_id="r1")
    assert tally.sentence() == ("candidate v3 has 37 compared rows against v2; no agreement figure below 100 rows: "
                                "63 more needed")
    assert tally.summary()["agreement_percent"] is None
    tally.compared, tally.agreed = 1208, 1177
    assert tally.sentence() == "candidate v3 agreed with v2 on 97.4% of 1,208 compared rows"


def test_a_disagreement_names_its_request_and_row() -> None:
    tally = ShadowTally(3, 2, "classification", 0.0, 0.0)
    tally.add([row(1), row(0), row(1)], [row(1), row(1), row(1)], request_id="a" * 32)
    tally.add([row(0), row(0)], [row(0), row(None)], request_id="b" * 32)
    assert tally.summary()["disagreement_examples"] == [
        {"request_id": "a" * 32, "row": 1, "column": "prediction", "served": 0, "candidate": 1},
        {"request_id": "b" * 32, "row": 1, "column": "prediction", "served": 0, "candidate": None}]


SET_JSON = {"task": "model_set",
            "components": [{"name": "delay_model", "task": "classification"},
                           {"name": "minutes_model", "task": "regression"}],
            "composed": [{"name": "late_risk", "kind": "weighted_mean", "terms": []}],
            "combined_rules": [{"name": "late_flag", "outputs": [["late_flag", "boolean"], ["band", "string"],
                                                                 ["score", "double"]]}]}


def test_a_model_set_compares_each_component_column_composed_and_combined_rule_column() -> None:
    assert compared_columns(SET_JSON) == {
        "delay_model_prediction": "label", "delay_model_probability": "value", "minutes_model_prediction": "value",
        "late_risk": "value", "late_flag": "label", "band": "label", "score": "value"}
    assert compared_columns({"task": "classification"}) == {"prediction": "label"}
    check_comparable("model_set", 3)  # no refusal


def set_row(label: object, p: object, minutes: object) -> dict[str, object]:
    return {"a_prediction": label, "a_probability": p, "b_prediction": minutes, "prediction": None}


def test_a_set_tally_counts_rows_and_each_column_within_its_tolerance() -> None:
    tally = ShadowTally(3, 2, "model_set", 0.0, 0.5,
                        columns={"a_prediction": "label", "a_probability": "value", "b_prediction": "value"})
    served = [set_row(1, 0.9, 10.0), set_row(0, 0.1, 20.0), set_row(None, None, None)] * 40
    cand = [set_row(1, 1.3, 10.4), set_row(1, 0.7, 25.0), set_row(None, None, None)] * 40
    tally.add(served, cand, request_id="r")
    summary = tally.summary()
    assert summary["compared_rows"] == 120 and summary["agreed_rows"] == 80  # rows 0 and 2 of each three
    assert {c: f["agreed_rows"] for c, f in summary["columns"].items()} == {
        "a_prediction": 80, "a_probability": 80, "b_prediction": 80}  # |0.7-0.1| and |25-20| are over 0.5
    assert summary["columns"]["b_prediction"] == {"kind": "value", "agreed_rows": 80, "agreement_percent": 66.667}
    assert summary["disagreement_examples"][:3] == [
        {"request_id": "r", "row": 1, "column": "a_prediction", "served": 0, "candidate": 1},
        {"request_id": "r", "row": 1, "column": "a_probability", "served": 0.1, "candidate": 0.7},
        {"request_id": "r", "row": 1, "column": "b_prediction", "served": 20.0, "candidate": 25.0}]
    assert tally.sentence() == ("candidate v3 agreed with v2 on 66.7% of 120 compared rows; "
                                "lowest column: a_prediction 66.7%; values agree within 0.5 + 0 x |served|")


def test_the_default_tolerance_reads_refits_that_differ_in_the_last_digits_as_agreeing() -> None:
    defaults = ServingConfig.model_validate({"inference_table": "main.s.inference"}).shadow
    tally = ShadowTally(3, 2, "regression", defaults.rtol, defaults.atol)
    served = [row(10.0 + i) for i in range(100)]
    tally.add(served, [row((10.0 + i) * (1 + 4e-6)) for i in range(100)], request_id="ridge")  # 4e-6 relative
    tally.add(served, [row((10.0 + i) * 1.01) for i in range(100)], request_id="other")  # 1% off: not the same
    assert (tally.compared, tally.agreed) == (200, 100)
    assert tally.sentence() == ("candidate v3 agreed with v2 on 50.0% of 200 compared rows; "
                                "values agree within 1e-09 + 0.001 x |served|")


def test_a_mirror_at_max_queue_0_compares_when_the_candidate_replica_is_idle_and_skips_when_busy(tmp_path) -> None:
    async def scenario() -> None:
        ep, backend, _ = fake_endpoint(tmp_path, max_queue=0)
        candidate = await ready_replica(ep, backend, "candidate", 2)
        tally = ShadowTally(2, 1, "classification", 0.0, 0.0)
        body = one_row({"a": "long"}, {"a": 1}).to_body()
        served = [{"prediction": None}]  # the fake replica answers a row without prediction: they agree
        await ep.candidates.mirror(tally, body, served, request_id="r1")
        candidate.busy = True
        await ep.candidates.mirror(tally, body, served, request_id="r2")
        assert (tally.compared, tally.agreed, tally.skipped, tally.mirror_failures) == (1, 1, 1, 0)

    asyncio.run(scenario())


@pytest.mark.parametrize("task", ["clustering", "anomaly_detection", "recommendation"])
def test_tasks_without_comparable_answers_refuse_to_start(task: str) -> None:
    with pytest.raises(ServingConflictError, match=f"candidate v4 is a {task} model; shadow compares"):
        check_comparable(task, 4)


def test_a_shadow_mirrors_after_the_reply_and_compares(candidate_endpoint, trained: Trained,
                                                       late_flights) -> None:
    ep = candidate_endpoint
    starts_before = len(ep.events("ml.shadow.start"))
    assert ep.client.post("/shadow", json={"version": 1}).status_code == 409  # the served version
    chosen = ep.client.post("/shadow", json={"version": 2})
    assert chosen.status_code == 200, chosen.text
    ep.wait_for(lambda s: bool(ready_replicas(s, "candidate")), what="the candidate replica")
    first, rest = late_flights.head(40), late_flights.iloc[40:140]
    reply = ep.score(records(first, trained.input_columns))
    assert {r["model_version"] for r in reply.json()["predictions"]} == {1}  # shadowing never answers
    sent = {reply.json()["request_id"]: first}
    status = ep.wait_for(lambda s: s["shadow"]["compared_rows"] == 40, what="40 compared rows", timeout_s=60)
    assert status["shadow"]["sentence"] == ("candidate v2 has 40 compared rows against v1; no agreement figure "
                                            "below 100 rows: 60 more needed")
    for part in (rest.head(50), rest.tail(50)):
        answered = ep.score(records(part, trained.input_columns))
        assert answered.status_code == 200
        sent[answered.json()["request_id"]] = part
    status = ep.wait_for(lambda s: s["shadow"]["compared_rows"] == 140, what="140 compared rows", timeout_s=60)

    runtime = LocalRuntime(ep.home)
    rows = late_flights.head(140)
    v1, v2 = expected_rows(chain_of(runtime, 1), rows), expected_rows(chain_of(runtime, 2), rows)
    agreed = sum(a["prediction"] == b["prediction"] for a, b in zip(v1, v2))
    assert status["shadow"]["agreed_rows"] == agreed
    examples = status["shadow"]["disagreement_examples"]
    assert len(examples) == min(5, 140 - agreed) and agreed < 140  # v2 disagrees somewhere on these rows
    for example in examples:  # each names the request and the row of it that disagreed
        part = sent[example["request_id"]].iloc[[example["row"]]]
        assert example["served"] == expected_rows(chain_of(runtime, 1), part)[0]["prediction"]
        assert example["candidate"] == expected_rows(chain_of(runtime, 2), part)[0]["prediction"] != example["served"]
    assert status["shadow"]["sentence"] == f"candidate v2 agreed with v1 on {100 * agreed / 140:.1f}% of 140 compared rows"

    # Choosing again retires the first candidate and resets the totals.
    assert ep.client.post("/shadow", json={"version": 2}).status_code == 200
    assert ep.status()["shadow"]["compared_rows"] == 0
    assert len(ep.events("ml.shadow.start")) - starts_before == 2
    stops = [e.detail for e in ep.events("ml.shadow.stop")]
    assert stops[-1]["compared_rows"] == 140 and stops[-1]["reason"] == "replaced by candidate v2"
    assert ep.client.delete("/shadow").status_code == 200
    ep.wait_for(lambda s: not [c for c in s["replicas"] if c["role"] == "candidate"], what="candidate stopped")
