"""The compiled part: admission proves the compiled plan agrees with the reference walk."""

import numpy as np
import pandas as pd

from lakescore.admission.agreement import null_patterns
from lakescore.admission.evidence import examine, part_flags
from lakescore.chain import FittedChain
from lakescore.steps import FittedStep


def with_first_step(chain: FittedChain, step: FittedStep) -> FittedChain:
    return FittedChain(chain.input_columns, chain.feature_columns, (step, *chain.steps), chain.model, chain.task,
                       chain.classes, chain.rules)


def test_the_demo_chain_is_compiled_probed_and_the_evidence_names_each_kernel(small_chain, flights_sample):
    evidence, problems = examine(small_chain, flights_sample.iloc[1000:1256])
    assert problems == []
    assert evidence["compiled"]["kernels"] == {"distance_outlier": "compiled", "impute_numeric": "compiled",
                                               "scale_numeric": "compiled", "one_hot": "compiled"}
    checks = {c["check"]: c["status"] for c in evidence["compiled"]["checks"]}
    assert checks == {"agree:whole": "passed", "agree:rows": "passed", "agree:empty": "passed",
                      "agree:nulls": "passed", "fresh_module": "passed"}
    assert part_flags(evidence)["compiled_probed"] is True


def test_a_kernel_that_reads_other_rows_is_caught_by_admission(broken, small_chain, flights_sample):
    chain = with_first_step(small_chain, FittedStep("BrokenKernel", "doubled", {"columns": ["dep_delay"]}))
    evidence, problems = examine(chain, flights_sample.iloc[1000:1256])
    failed = {c["check"] for c in evidence["compiled"]["checks"] if c["status"] == "failed"}
    assert {"agree:whole", "agree:rows"} <= failed
    assert any(p.startswith("Compiled plan partition probe failed agree:whole: output_mismatch. The compiled plan gives")
               for p in problems)
    assert "Chain partition probe failed chunks:1 only because Compiled plan failed agree:whole first" in " ".join(problems)
    assert part_flags(evidence)["compiled_probed"] is False
    # the step's own (reference) checks pass: only the comparison with the plan sees the bug
    step = next(s for s in evidence["builtins"] if s["name"] == "doubled")
    assert all(c["status"] == "passed" for c in step["checks"])


def test_a_step_without_a_kernel_runs_its_reference_apply_inside_the_plan(broken, small_chain, flights_sample):
    chain = with_first_step(small_chain, FittedStep("BrokenCumulative", "running", {"columns": ["dep_delay"]}))
    assert chain.plan.kernels["running"] == "reference"
    sample = flights_sample.iloc[:50]
    pd.testing.assert_frame_equal(chain.predict(sample), chain.reference_predict(sample))


def test_null_patterns_blank_each_nullable_column_with_its_own_missing_value():
    sample = pd.DataFrame({"x": [1.0, 2.0], "n": pd.array([1, 2], dtype="Int64"), "t": ["a", "b"],
                           "i": np.array([1, 2])})
    patterns = dict(null_patterns(sample))
    assert list(patterns) == ["x missing", "n missing", "t missing", "row 0 missing", "nullable dtypes",
                              "nullable dtypes, row 0 missing"]
    assert str(patterns["nullable dtypes"]["i"].dtype) == "Int64"
    assert patterns["nullable dtypes, row 0 missing"]["i"].isna().tolist() == [True, False]
    assert patterns["x missing"]["x"].isna().all() and patterns["x missing"]["x"].dtype == "float64"
    assert patterns["n missing"]["n"].dtype == "Int64" and patterns["n missing"]["n"].isna().all()
    assert patterns["t missing"]["t"].tolist() == [None, None]
    assert patterns["row 0 missing"]["i"].tolist() == [1, 2]  # plain int64 has no missing value


def test_a_kernel_that_writes_into_the_callers_frame_fails_admission_and_leaves_the_frame(broken, small_chain,
                                                                                          flights_sample):
    chain = with_first_step(small_chain, FittedStep("BrokenInPlaceKernel", "doubled", {"columns": ["dep_delay"]}))
    sample = flights_sample.iloc[1000:1256].copy()
    before = sample["dep_delay"].copy()
    evidence, problems = examine(chain, sample)
    failed = {c["check"]: c["reason"] for c in evidence["compiled"]["checks"] if c["status"] == "failed"}
    assert "read-only" in failed["agree:rows"]  # a row no rule excluded: its arrays are the caller's
    pd.testing.assert_series_equal(sample["dep_delay"], before)
