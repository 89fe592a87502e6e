"""References to user functions (lakescore.usercode): a model saved when the project package was
called ``features`` loads its functions from ``lakescore_project``, never from another ``features``
package that a shared cluster puts on the path."""

import sys

import pandas as pd
import pytest

from lakescore.chain import FittedChain
from lakescore.usercode import FunctionRef, UserCodeError

# another top-level ``features`` package (a library, or a Git folder on sys.path): same names, other answers
DECOY = {"__init__.py": "",
         "preprocessing.py": "def dep_clock(frame):\n    return frame['hour'] * 0.0 - 1.0\n",
         "scoring.py": "def has_departed(frame, params):\n    return frame['dep_time'].isna()\n"}


@pytest.fixture
def decoy_features(tmp_path, monkeypatch):
    """A ``features`` package first on ``sys.path``, with nothing of it imported yet."""
    root = tmp_path / "other"
    (root / "features").mkdir(parents=True)
    for name, text in DECOY.items():
        (root / "features" / name).write_text(text)
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "features" or m.startswith("features.")]:
        monkeypatch.delitem(sys.modules, name)
    return root / "features"


@pytest.fixture(scope="module")
def clock_chain(flights_sample, demo_recipe):
    """A chain with a custom step (``dep_clock``) and an eligibility rule (``has_departed``) of the
    project package, fitted on the 2,000-flight sample."""
    from lakescore.config import ScoringConfig
    from lakescore.frames import derive_label
    from lakescore.rules import load_rules
    from lakescore.training import ChainRecipe, fit_chain

    rules = load_rules(ScoringConfig.model_validate(
        {"eligibility": [{"name": "cancelled", "function": "has_departed", "columns": ["dep_time"]}]}))
    steps = [{"step": "custom", "name": "dep_clock", "ref": "lakescore_project.preprocessing:dep_clock_step",
              "columns": ["hour", "minute"]}, *demo_recipe]
    y = derive_label(flights_sample, column="is_late", expression="arr_delay > 15")
    return fit_chain(flights_sample, y, ChainRecipe(steps=steps, model_class="LogisticRegression",
                                                    model_params={"max_iter": 300}, rules=rules,
                                                    feature_columns=["dep_delay", "distance", "hour", "carrier",
                                                                     "origin", "minute"]))


def test_a_model_saved_under_the_former_package_name_scores_with_the_project_package(
        clock_chain, flights_sample, tmp_path, decoy_features):
    folder = clock_chain.save(tmp_path / "chain")
    saved = folder / "chain.json"
    text = saved.read_text()
    # the step's ref, its function's module and the rule's module: what a model saved before the rename names
    assert text.count('"lakescore_project.') == 3
    saved.write_text(text.replace('"lakescore_project.', '"features.'))
    old = FittedChain.load(folder)
    assert old.rules[0].function.module == "features.scoring"
    rows = flights_sample.iloc[:300]
    got = old.predict(rows)
    # what the project's code answers: dep_clock = hour + minute / 60; no departure time -> excluded
    expected_excluded = rows["dep_time"].isna()
    assert (got["scoring_status"] == "excluded").tolist() == expected_excluded.tolist()
    assert expected_excluded.sum() > 0
    pd.testing.assert_frame_equal(got, clock_chain.predict(rows))
    assert "features" not in sys.modules  # the other package was never imported


def test_a_missing_function_saved_under_the_former_name_names_where_it_was_looked_for():
    ref = FunctionRef("features.gone", "has_departed", "", "0" * 64)
    with pytest.raises(UserCodeError) as err:
        ref.load()
    assert str(err.value).startswith("function features.gone:has_departed (saved under the project package's "
                                     "former name; loaded from lakescore_project.gone): cannot import "
                                     "'lakescore_project.gone:has_departed' (No module named 'lakescore_project.gone')")
