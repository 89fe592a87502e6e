"""check_step: every probe check on one step; each check catches its broken fixture, names the
check, the column and a fix; every built-in kind passes on an adversarial frame."""

import pandas as pd
import pytest
from fixtures import step_contract

from lakescore.admission import StepChecks, check_step
from lakescore.admission.perturb import UNSEEN_TEXT, all_missing, unseen_text
from lakescore.errors import ProbeError, StepCheckError, StepError
from lakescore.steps import FittedStep, learn_step

CHECKS = ["repeat", "chunks:1", "chunks:2", "chunks:7", "reverse", "index_shift", "empty", "perturb",
          "json_round_trip", "dtypes", "agree:whole", "agree:rows", "agree:empty", "agree:nulls"]


@pytest.fixture(scope="module")
def contract():
    return step_contract


@pytest.fixture
def sample(flights_sample):
    rows = flights_sample.head(64).copy()
    rows["code"] = rows["flight"].astype(str)  # digits only
    return rows


def test_every_check_runs_and_passes_on_a_good_step(sample):
    checks = check_step("StandardScaler", {"columns": ["dep_delay", "distance"]}, sample)
    assert isinstance(checks, StepChecks) and checks.names == CHECKS
    assert [r.status for r in checks.results] == ["passed"] * len(CHECKS)
    assert checks.step.name == "StandardScaler"  # name defaults to the kind
    mean = sample["distance"].mean()
    std = sample["distance"].std(ddof=0)
    assert checks.step.apply(sample.head(1))["distance"].iloc[0] == pytest.approx((sample["distance"].iloc[0] - mean) / std)


def test_a_batch_mean_fails_chunks_naming_the_column_and_a_fix(broken, sample):
    with pytest.raises(StepCheckError) as err:
        check_step("BrokenBatchMean", {"name": "mean_fill", "columns": ["dep_delay"]}, sample)
    assert isinstance(err.value, ProbeError) and err.value.code == "step_check_failed"
    assert err.value.fields["check"] == "chunks:1" and err.value.fields["column"] == "dep_delay"
    assert err.value.problems[0] == ("Step 'mean_fill' (BrokenBatchMean) partition probe failed chunks:1: "
                                     "output_mismatch in column 'dep_delay'. Use a stable dtype or another setting, "
                                     "so a row's answer does not depend on its batch.")
    assert str(err.value).startswith("step 'mean_fill' failed check_step:\n  - Step 'mean_fill'")


def test_a_dtype_that_follows_the_data_fails_dtypes_on_an_all_null_batch(broken, sample):
    checks = check_step("BrokenDtypeFollowsData", {"columns": ["code"]}, sample, raises=False)
    result = checks["dtypes"]
    assert (result.status, result.column) == ("failed", "code")
    assert result.reason == "all null batch: dtype_mismatch (float64, not Int64)"
    assert checks["chunks:7"].status == "passed"  # every chunk holds digits only: only dtypes sees it


def test_a_kernel_that_reads_other_rows_fails_agreement(broken, sample):
    checks = check_step("BrokenKernel", {"columns": ["dep_delay"]}, sample, raises=False)
    assert [r.check for r in checks.failed] == ["agree:whole", "agree:rows", "agree:nulls"]
    assert (checks["agree:whole"].reason, checks["agree:whole"].column) == ("output_mismatch", "dep_delay")
    assert checks["agree:rows"].reason == "row 0: output_mismatch"


def test_state_that_does_not_round_trip_fails_json_round_trip(sample):
    fitted = learn_step({"step": "StandardScaler", "name": "s", "columns": ["distance"]}, sample, None)
    tupled = FittedStep(fitted.kind, fitted.name, {**fitted.state, "note": (1, 2)})
    assert check_step(tupled, None, sample, raises=False)["json_round_trip"].reason == \
        "state changed in a JSON round trip"
    with pytest.raises(StepCheckError, match=r"failed json_round_trip: state is not JSON-able \(step state holds a "
                                             r"set.*Keep the state to numbers"):
        check_step(FittedStep(fitted.kind, fitted.name, {**fitted.state, "note": {1, 2}}), None, sample)


def test_a_users_fitted_step_is_checked_and_has_no_kernel(flights_sample):
    params = {"name": "carrier_delay", "ref": "lakescore_project.preprocessing:carrier_delay_step",
              "columns": ["carrier", "dep_delay"]}
    checks = check_step("custom", params, flights_sample.head(300))
    assert checks.step.kind == "custom_fitted"
    assert checks["perturb"].status == "passed" and checks["dtypes"].status == "passed"
    assert checks["agree:whole"].status == "skipped"
    assert checks["agree:whole"].reason == "custom_fitted has no compiled kernel: the compiled chain runs its reference apply"
    # the same step, once fitted, is checked as it is
    again = check_step(checks.step, None, flights_sample.head(300))
    assert again.step is checks.step and again.names == CHECKS


def test_a_fitted_step_with_params_is_refused(sample):
    fitted = learn_step({"step": "StandardScaler", "name": "s", "columns": ["distance"]}, sample, None)
    with pytest.raises(StepError, match="pass params=None for a fitted step"):
        check_step(fitted, {"columns": ["distance"]}, sample)
    with pytest.raises(StepError, match="params say step 'MinMaxScaler' but kind is 'StandardScaler'"):
        check_step("StandardScaler", {"step": "MinMaxScaler", "columns": ["distance"]}, sample)


def test_adversarial_batches_keep_their_dtype(sample):
    blank = all_missing(sample.head(3))
    assert blank["carrier"].tolist() == [None] * 3 and blank["dep_delay"].isna().all()
    assert blank["year"].tolist() == sample["year"].head(3).tolist()  # plain int64 cannot hold a missing value
    odd = unseen_text(sample.head(3).assign(carrier=pd.array(["UA", None, "AA"], dtype="string")))
    assert odd["carrier"].tolist() == [UNSEEN_TEXT, pd.NA, UNSEEN_TEXT] and str(odd["carrier"].dtype) == "string"
    assert odd["distance"].equals(sample["distance"].head(3))


def adversarial(frame: pd.DataFrame) -> pd.DataFrame:
    """24 real rows, then 4 with every value missing, 4 with unseen text everywhere, 4 with extreme
    numbers (±1e12 in float columns, 10**12 in distance), and one row alone."""
    extreme = frame.iloc[32:36].copy()
    for column in ["dep_time", "dep_delay", "arr_delay", "air_time"]:
        extreme[column] = [1e12, -1e12, 1e-12, -0.0]
    extreme["distance"] = [10**12, 1, 0, 10**12]
    return pd.concat([frame.iloc[:24], all_missing(frame.iloc[24:28]), unseen_text(frame.iloc[28:32]), extreme,
                      frame.iloc[36:37]])


def _first_cases():
    return [pytest.param(kind, entries[0], id=kind, marks=step_contract.marks(kind))
            for kind, entries in step_contract.CASES.items()]


# Vectorizers that learn a vocabulary make one output column per word, and every check compares
# every column: on the contract's 500 learning rows tail numbers give ~440 columns and a minute of
# checks. They learn on a small corpus here (~100 words: still unseen, missing and known words in
# the adversarial rows); tests/steps/test_text.py checks them on the full learning frame.
SMALL_CORPUS = {"count_vectorizer": 100, "tfidf_vectorizer": 100}


@pytest.mark.parametrize("kind, entry", _first_cases())
def test_every_builtin_kind_passes_on_an_adversarial_frame(kind, entry, contract, flights_sample):
    train, label = contract.learning_frame(flights_sample)
    train, label = train.head(SMALL_CORPUS.get(kind, len(train))), label.head(SMALL_CORPUS.get(kind, len(label)))
    sample = adversarial(flights_sample[contract.COLUMNS])
    checks = check_step(kind, entry, train, label, sample=sample, raises=False)  # learned once, checked thrice
    assert not checks.failed, [r.located_message for r in checks.failed]
    for rows in (sample.iloc[[26]], sample.iloc[:0]):  # one null row, no rows: the same fitted step
        again = check_step(checks.step, None, train, sample=rows, raises=False)
        assert again.names == CHECKS and not again.failed, [r.located_message for r in again.failed]
