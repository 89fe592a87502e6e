"""Admission end to end: problems name the part that failed first, and the parts that failed because of it."""


from lakescore.admission.evidence import examine
from lakescore.chain import FittedChain
from lakescore.config import ScoringConfig
from lakescore.rules import load_output_rules
from lakescore.steps.base import FittedStep


def test_a_step_failure_is_reported_once_and_the_output_rule_and_chain_blame_it(broken, small_chain,
                                                                                  flights_sample, monkeypatch):
    rules = load_output_rules(ScoringConfig.model_validate({"output": [
        {"name": "risk_band", "function": "risk_band", "columns": [], "outputs": {"risk_band": "string"},
         "params": {"high": 0.5, "medium": 0.2}}]}))
    step = FittedStep("BrokenModuleState", "module_state", {"columns": ["dep_delay"]})
    chain = FittedChain(small_chain.input_columns, small_chain.feature_columns, (step, *small_chain.steps),
                        small_chain.model, small_chain.task, small_chain.classes, small_chain.rules,
                        output_rules=tuple(rules))
    monkeypatch.setattr(broken, "SCALE", 3.0)
    evidence, problems = examine(chain, flights_sample.iloc[1000:1256])
    blame = ("only because Step 'module_state' (BrokenModuleState) failed fresh_module first (see above); "
             "fixing that fixes this.")
    assert problems == [
        "Step 'module_state' (BrokenModuleState) partition probe failed fresh_module: output_mismatch; module "
        "variable broken_steps.SCALE is 3.0 in this process but 1.0 in a fresh import. Keep everything apply() "
        "reads in the saved state (learn()'s return value), never in module variables that training or scoring "
        "changes.",
        f"Compiled plan partition probe failed fresh_module {blame}",
        f"Output rule 'risk_band' partition probe failed fresh_module {blame}",
        f"Chain partition probe failed fresh_module {blame}",
    ]
    assert evidence["rules"][-1]["name"] == "risk_band"  # the evidence keeps the raw result
    assert {c["check"]: c["status"] for c in evidence["rules"][-1]["checks"]}["fresh_module"] == "failed"


def test_a_custom_forward_fill_is_refused_by_the_lint_and_by_perturb(flights_sample):
    from lakescore.frames import derive_label
    from lakescore.training import ChainRecipe, fit_chain

    recipe = [{"step": "custom", "name": "forward_fill", "columns": ["dep_delay"],
               "ref": "broken_user_code:forward_fill_step"},
              {"step": "SimpleImputer", "name": "impute", "columns": ["dep_delay", "distance"], "strategy": "median"}]
    y = derive_label(flights_sample, column="is_late", expression="arr_delay > 15")
    chain = fit_chain(flights_sample, y, ChainRecipe(steps=recipe, model_class="LogisticRegression",
                                                     model_params={"max_iter": 300},
                                                     feature_columns=["dep_delay", "distance"]))
    holdout = flights_sample.iloc[1000:][flights_sample["dep_delay"].iloc[1000:].notna()]  # no gap, as in the issue
    _, problems = examine(chain, holdout)
    assert problems == [
        "Custom step 'forward_fill' reads other rows (broken_user_code.py line 82: frame['dep_delay'].ffill()). "
        "Read only the row's own values: fill a gap with a value learned in learn() and read from state "
        "(e.g. fillna(state['dep_delay'])), never from the rows around it.",
        "Custom step 'forward_fill' partition probe failed perturb: blanked_row_reads_neighbours. Fill a missing "
        "value from a value learned in learn() and kept in state, never from other rows (ffill, bfill, "
        "interpolate, batch statistics).",
    ]
