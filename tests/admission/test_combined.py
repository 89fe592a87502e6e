"""Admission of a model set: every component on its own, combined rules probed, evidence sealed."""

import dataclasses
import json

import pytest
from model_set_rules import above_batch_mean

from lakescore.admission.certificate import require_admitted, seal, verify
from lakescore.admission.combined import admit_set
from lakescore.errors import CertificateError, ProbeError
from lakescore.rules import OutputRule
from lakescore.saved_models import load_saved
from lakescore.usercode import FunctionRef


@pytest.fixture(scope="module")
def set_evidence(small_set, flights_sample):
    return admit_set(small_set, flights_sample.iloc[1000:])


def test_every_component_and_combined_rule_is_probed_and_sealed(small_set, set_evidence, tmp_path):
    evidence = set_evidence["model_set"]
    assert list(evidence["components"]) == ["delay_model", "minutes_model"]
    assert evidence["components"]["minutes_model"]["model"]["class"] == "LinearRegression"
    (rule,) = evidence["combined_rules"]
    assert (rule["name"], rule["kind"], rule["lint"]["status"]) == ("late_flag", "combined", "passed")
    assert [c["check"] for c in rule["checks"]] == ["repeat", "chunks:1", "chunks:2", "chunks:7", "reverse",
                                                    "index_shift", "empty", "perturb", "fresh_module"]
    assert [c["check"] for c in evidence["set"]["checks"]] == ["repeat", "chunks:1", "chunks:7", "fresh_module"]
    folder = small_set.save(tmp_path / "set")
    certificate = seal(folder, small_set, evidence=set_evidence)
    assert certificate.evidence["parts"]["combined_probed"] and certificate.evidence["parts"]["compiled_probed"]
    require_admitted(certificate)
    verify(certificate, folder, load_saved(folder))  # the saved set is what was sealed


def test_a_changed_component_or_set_json_is_refused(small_set, set_evidence, tmp_path):
    folder = small_set.save(tmp_path / "set")
    certificate = seal(folder, small_set, evidence=set_evidence)
    chain_json = folder / "components" / "minutes_model" / "chain.json"
    meta = json.loads(chain_json.read_text())
    meta["output_rules"] = [small_set.combined_rules[0].to_json()]  # a rule slipped into one component
    chain_json.write_text(json.dumps(meta))
    with pytest.raises(CertificateError, match="artifact_sha256: sealed"):
        verify(certificate, folder, load_saved(folder))
    other = small_set.save(tmp_path / "other")
    set_json = other / "set.json"
    set_json.write_text(set_json.read_text().replace('"weighted_mean"', '"weighted_sum"'))
    with pytest.raises(CertificateError, match="recipe_sha256: sealed"):
        verify(certificate, other, load_saved(other))


def test_a_batch_dependent_combined_rule_is_rejected_naming_the_check(small_set, flights_sample):
    rule = OutputRule("above_mean", 1, FunctionRef.of(above_batch_mean, what="rule"), ("minutes_model_prediction",),
                      (("above_mean", "boolean"),))
    broken = dataclasses.replace(small_set, combined_rules=(rule,))
    with pytest.raises(ProbeError) as err:
        admit_set(broken, flights_sample.iloc[1000:])
    problems = err.value.problems
    assert any("Combined rule 'above_mean' reads a batch statistic" in p for p in problems)  # the lint
    assert "Combined rule 'above_mean' partition probe failed chunks:1: output_mismatch." in " ".join(problems)
    assert not any(p.startswith("Component ") for p in problems)  # the components themselves are admitted
