"""Training a model set: each component's threshold is set, and refused, under its own key."""

import pytest
import yaml

from lakescore.config import load_project
from lakescore.errors import ConfigError
from lakescore.frames import derive_label
from lakescore.training_set import with_set_thresholds


def test_a_components_threshold_error_names_the_components_key(set_config, small_set, flights_sample):
    path = set_config / "training.yml"
    training = yaml.safe_load(path.read_text())
    training["model_set"]["components"]["delay_model"]["model"]["threshold"] = {"classes": {0: 0.6, 1: 0.4}}
    path.write_text(yaml.safe_dump(training, sort_keys=False))
    holdout = flights_sample.iloc[1000:]
    labels = {"delay_model": derive_label(holdout, column="is_late", expression="arr_delay > 15"),
              "minutes_model": holdout["arr_delay"]}
    with pytest.raises(ConfigError) as err:
        with_set_thresholds(small_set, load_project(set_config), holdout, labels)
    assert err.value.problems == [
        "config/training.yml: model_set.components.delay_model.model.threshold classes is for a model of 3 or more "
        "classes; this one has [0, 1]; got {classes: {0: 0.6, 1: 0.4}} (write threshold: <p> for class 1)"]


def test_each_component_gets_its_own_threshold(set_config, small_set, flights_sample):
    holdout = flights_sample.iloc[1000:]
    labels = {"delay_model": derive_label(holdout, column="is_late", expression="arr_delay > 15"),
              "minutes_model": holdout["arr_delay"]}
    thresholded = dict(with_set_thresholds(small_set, load_project(set_config), holdout, labels).components)
    assert thresholded["delay_model"].threshold.value == 0.4  # SET_TRAINING's delay_model threshold
    assert thresholded["minutes_model"].threshold is None  # a regressor: none
