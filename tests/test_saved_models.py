"""load_saved: a saved folder comes back as what was saved (a chain, a model set, a pasting ensemble),
told apart by ``set.json`` and its ``combine`` entry; chain_meta reads the saved JSON alone."""

import json

import mlflow
import pandas as pd
import pytest

from lakescore.chain import FittedChain
from lakescore.model_set import ModelSet
from lakescore.pasting import PastingEnsemble, paste
from lakescore.saved_models import chain_meta, load_saved


def test_each_saved_kind_loads_back_as_its_own_type_and_scores_as_saved(small_chain, small_set, flights_sample,
                                                                         tmp_path):
    ensemble = paste([("slice_00", small_chain), ("slice_01", small_chain)], threshold=None, coverage={"slices": 2})
    saved = {"chain": small_chain, "set": small_set, "pasting": ensemble}
    loaded = {name: load_saved(model.save(tmp_path / name)) for name, model in saved.items()}
    assert {name: type(model) for name, model in loaded.items()} == {
        "chain": FittedChain, "set": ModelSet, "pasting": PastingEnsemble}
    assert json.loads((tmp_path / "pasting" / "set.json").read_text())["combine"] == "pasting"
    assert "combine" not in json.loads((tmp_path / "set" / "set.json").read_text())
    rows = flights_sample.iloc[:100]
    for name, model in saved.items():
        pd.testing.assert_frame_equal(loaded[name].predict(rows), model.predict(rows))
    # two copies of one chain: their mean is that chain's own probability
    pd.testing.assert_series_equal(loaded["pasting"].predict(rows)["probability"], small_chain.predict(rows)["probability"])


def test_chain_meta_reads_set_json_only_where_chain_json_is_absent(tmp_path):
    model = tmp_path / "model"
    chain_dir = model / "artifacts" / "chain"
    chain_dir.mkdir(parents=True)
    (chain_dir / "set.json").write_text('{"engine": "pandas", "components": ["a", "b"]}')
    assert chain_meta(str(model)) == {"engine": "pandas", "components": ["a", "b"]}  # a model set's folder
    (chain_dir / "chain.json").symlink_to(chain_dir / "gone.json")  # there, but it cannot be read
    with pytest.raises((mlflow.exceptions.MlflowException, OSError), match=r"chain\.json"):
        chain_meta(str(model))  # the reader's error (a local store: the listing's), not set.json's content
    (chain_dir / "chain.json").unlink()
    (chain_dir / "chain.json").write_text('{"engine": "pola')  # corrupt: its own error, not set.json's content
    with pytest.raises(ValueError, match="Unterminated string"):
        chain_meta(str(model))
    (chain_dir / "chain.json").write_text('{"engine": "polars"}')
    assert chain_meta(str(model)) == {"engine": "polars"}
