"""OneHotEncoder, OrdinalEncoder, TargetEncoder, DummyEncoder, LabelEncoder and WOEEncoder."""

import numpy as np
import pandas as pd
import pytest
from fixtures.step_contract import cases, check_contract, learning_frame

from lakescore.columns import Columns
from lakescore.errors import StepError
from lakescore.frames import floats_close
from lakescore.steps import learn_step, parse_params


@pytest.mark.parametrize("raw", cases("OneHotEncoder", "OrdinalEncoder", "TargetEncoder", "DummyEncoder", "LabelEncoder",
                                       "WOEEncoder"))
def test_contract(raw, flights_sample):
    check_contract(raw, flights_sample)


def test_one_hot_unseen_category_gives_all_zeros():
    train = pd.DataFrame({"carrier": ["UA", "AA", "UA", "B6"], "distance": [1, 2, 3, 4]})
    fitted = learn_step({"step": "OneHotEncoder", "name": "oh", "columns": ["carrier"]}, train, None)
    out = fitted.apply(pd.DataFrame({"carrier": ["AA", "DL", None], "distance": [5, 6, 7]}))
    assert list(out.columns) == ["distance", "carrier_AA", "carrier_B6", "carrier_UA"]
    assert out[["carrier_AA", "carrier_B6", "carrier_UA"]].to_numpy().tolist() == [
        [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("copies", [1, 100])  # 5 and 500 rows: both of Positions.of's paths
def test_one_hot_kernel_reads_every_way_of_writing_missing_as_all_zeros(copies):
    from lakescore.compiled import stage_of

    train = pd.DataFrame({"carrier": ["UA", "AA", "UA", "B6"]})
    fitted = learn_step({"step": "OneHotEncoder", "name": "oh", "columns": ["carrier"]}, train, None)
    rows = pd.DataFrame({"carrier": np.array(["AA", None, np.nan, pd.NA, "DL"] * copies, dtype=object)})
    want = fitted.apply(rows)
    batch = Columns.from_frame(rows, rows.columns)
    stage_of(fitted, None).kernel.apply(batch)
    got = batch.frame(list(want.columns))
    pd.testing.assert_frame_equal(got, want)
    assert got.to_numpy().sum() == copies  # only the AA rows have a one


def test_one_hot_infrequent_categories_encode_like_unseen_ones():
    train = pd.DataFrame({"dest": ["LAX"] * 3 + ["SFO"] * 3 + ["BOS"]})
    fitted = learn_step({"step": "OneHotEncoder", "name": "oh", "columns": ["dest"], "min_frequency": 2},
                        train, None)
    assert fitted.state["categories"] == [["LAX", "SFO"]]
    assert fitted.apply(pd.DataFrame({"dest": ["BOS"]})).to_numpy().tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize("raw,message", [
    ({"max_categories": 10}, "max_categories: Value error, must be null"),
    ({"include_missing": True}, "include_missing: Value error, must be false"),
    ({"column_names": "pretty"}, "column_names: Input should be 'slug' or 'raw'"),
])
def test_one_hot_config_is_strict(raw, message):
    with pytest.raises(StepError, match=message):
        parse_params({"step": "OneHotEncoder", "name": "oh", "columns": ["carrier"], **raw})


def test_one_hot_refuses_categories_whose_slugs_collide():
    train = pd.DataFrame({"dest": ["A-B", "A B"]})
    with pytest.raises(StepError, match=r"same column name\(s\) \['dest_A_B'\]; use column_names: raw"):
        learn_step({"step": "OneHotEncoder", "name": "oh", "columns": ["dest"]}, train, None)


def test_ordinal_encoder_by_hand():
    train = pd.DataFrame({"origin": ["LGA", "EWR", "JFK", None]})
    fitted = learn_step({"step": "OrdinalEncoder", "name": "o", "columns": ["origin"]}, train, None)
    out = fitted.apply(pd.DataFrame({"origin": ["EWR", "JFK", "LGA", "SFO", None]}))["origin"].tolist()
    assert out[:4] == [0.0, 1.0, 2.0, -1.0] and np.isnan(out[4])


def test_ordinal_kernel_codes_numbers_by_their_text():
    train = pd.DataFrame({"month": [3, 1, 2]})  # categories '1', '2', '3'
    fitted = learn_step({"step": "OrdinalEncoder", "name": "o", "columns": ["month"], "missing_value": -2},
                        train, None)
    for month, want in [(pd.Series([3, 1]), [2.0, 0.0]),  # int64: '3', '1'
                        (pd.Series([3.0, np.nan]), [-1.0, -2.0]),  # float64: '3.0' is unseen
                        (pd.Series([2, None], dtype="Int64"), [1.0, -2.0])]:
        frame = pd.DataFrame({"month": month})
        batch = Columns.from_frame(frame, ["month"])
        fitted.kernel().apply(batch)
        assert batch.array("month").dtype == np.float64 and batch.array("month").tolist() == want
        assert fitted.apply(frame)["month"].tolist() == want


def test_target_encoder_matches_sklearn_encodings(flights_sample):
    from sklearn.preprocessing import TargetEncoder

    train, label = learning_frame(flights_sample)
    fitted = learn_step({"step": "TargetEncoder", "name": "t", "columns": ["carrier"]}, train, label)
    reference = TargetEncoder(target_type="binary").fit(train[["carrier"]].astype(object), label)
    seen = flights_sample[flights_sample["carrier"].isin(train["carrier"])][["carrier"]]
    assert floats_close(fitted.apply(seen)["carrier"], reference.transform(seen.astype(object))[:, 0]).all()
    unseen = fitted.apply(pd.DataFrame({"carrier": ["ZZ"]}))["carrier"].iloc[0]
    assert unseen == pytest.approx(label.mean(), rel=1e-12)


def test_target_encoder_cross_fits_the_training_rows_by_hand():
    # cv 2 without shuffle: rows 0-2 are one fold, rows 3-5 the other; smooth 1.0:
    # encoding = (sum of y in the category + 1.0 * mean y) / (count + 1.0), over the rows that count
    train = pd.DataFrame({"c": ["a", "a", "b", "a", "b", "b"]})
    y = pd.Series([1.0, 3.0, 5.0, 2.0, 6.0, 4.0])
    fitted = learn_step({"step": "TargetEncoder", "name": "t", "columns": ["c"], "smooth": 1.0, "cv": 2,
                         "target_type": "continuous", "shuffle": False}, train, y)
    # all six rows: mean 3.5; a: (1+3+2 + 3.5)/4 = 2.375; b: (5+6+4 + 3.5)/4 = 4.625
    assert fitted.apply(train)["c"].tolist() == [2.375, 2.375, 4.625, 2.375, 4.625, 4.625]
    # rows 0-2 from rows 3-5 (mean 4): a (2+4)/2 = 3, b (6+4+4)/3 = 14/3;
    # rows 3-5 from rows 0-2 (mean 3): a (1+3+3)/3 = 7/3, b (5+3)/2 = 4
    crossed = fitted.apply_training(train, y)["c"].to_numpy()
    assert floats_close(crossed, np.array([3.0, 3.0, 14 / 3, 7 / 3, 4.0, 4.0])).all()
    assert train["c"].tolist() == ["a", "a", "b", "a", "b", "b"]  # the input is left as it was


def test_target_encoder_cross_fit_matches_sklearn_fit_transform(flights_sample):
    import sklearn
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import TargetEncoder

    train, label = learning_frame(flights_sample)
    fitted = learn_step({"step": "TargetEncoder", "name": "t", "columns": ["carrier", "dest"]}, train, label)
    folds = ({"cv": StratifiedKFold(5, shuffle=True, random_state=0)}
             if tuple(int(p) for p in sklearn.__version__.split(".")[:2]) >= (1, 9)
             else {"cv": 5, "shuffle": True, "random_state": 0})
    data = train[["carrier", "dest"]].astype(object)
    reference = TargetEncoder(target_type="binary", **folds)
    want = reference.fit_transform(data, label)
    got = fitted.apply_training(train, label)[["carrier", "dest"]].to_numpy()
    assert floats_close(got, want).all()
    assert floats_close(fitted.apply(train)[["carrier", "dest"]].to_numpy(), reference.transform(data)).all()
    assert not floats_close(got, reference.transform(data)).all()  # the cross-fitted rows differ


def test_target_encoder_with_too_few_rows_per_fold_names_cv_and_a_fix():
    train = pd.DataFrame({"c": ["a", "b", "a", "b", "a", "b"]})
    fitted = learn_step({"step": "TargetEncoder", "name": "t", "columns": ["c"]}, train,
                        pd.Series([0, 0, 0, 0, 1, 1]))
    with pytest.raises(StepError, match=r"step 't' \(TargetEncoder\): cv: 5 folds need at least 5 training rows "
                                        r"of its rarer class; got 2. Lower cv"):
        fitted.apply_training(train, pd.Series([0, 0, 0, 0, 1, 1]))


def test_target_encoder_needs_the_label():
    with pytest.raises(StepError, match="needs the label at training"):
        learn_step({"step": "TargetEncoder", "name": "t", "columns": ["carrier"]},
                   pd.DataFrame({"carrier": ["UA"]}), None)


def _kernel_out(fitted, frame):
    batch = Columns.from_frame(frame, frame.columns)
    fitted.kernel().apply(batch)
    return batch


def test_dummy_encoder_drops_the_first_level_and_unseen_gives_all_zeros():
    train = pd.DataFrame({"origin": ["JFK", "EWR", "LGA", "JFK"], "distance": [1, 2, 3, 4]})
    fitted = learn_step({"step": "DummyEncoder", "name": "d", "columns": ["origin"]}, train, None)
    assert fitted.state["reference"] == ["EWR"]
    rows = pd.DataFrame({"origin": ["EWR", "JFK", "LGA", "SFO", None], "distance": [5, 6, 7, 8, 9]})
    out = fitted.apply(rows)
    assert list(out.columns) == ["distance", "origin_JFK", "origin_LGA"]
    want = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]  # EWR, unseen SFO, missing: zeros
    assert out[["origin_JFK", "origin_LGA"]].to_numpy().tolist() == want
    batch = _kernel_out(fitted, rows)
    assert [batch.array("origin_JFK").tolist(), batch.array("origin_LGA").tolist()] == [list(c) for c in zip(*want)]


def test_dummy_encoder_takes_a_declared_reference_level():
    train = pd.DataFrame({"origin": ["JFK", "EWR", "LGA"]})
    fitted = learn_step({"step": "DummyEncoder", "name": "d", "columns": ["origin"], "reference": {"origin": "JFK"}},
                        train, None)
    assert fitted.apply(pd.DataFrame({"origin": ["JFK", "EWR"]})).to_dict("list") == {
        "origin_EWR": [0.0, 1.0], "origin_LGA": [0.0, 0.0]}
    with pytest.raises(StepError, match=r"reference level 'SFO' of column 'origin' is not among its training "
                                        r"categories \['EWR', 'JFK', 'LGA'\]; name one of them"):
        learn_step({"step": "DummyEncoder", "name": "d", "columns": ["origin"], "reference": {"origin": "SFO"}},
                   train, None)


@pytest.mark.parametrize("raw, message", [
    ({"step": "OrdinalEncoder", "categories": {"dest": ["SFO"], "carrier": ["UA"]}},
     "step 'e': categories name column(s) ['carrier', 'dest'] that are not in columns ['origin']; add them to "
     "columns or remove them"),
    ({"step": "DummyEncoder", "reference": {"dest": "SFO"}},
     "step 'e': reference names column(s) ['dest'] that are not in columns ['origin']; add them to columns or "
     "remove them")])
def test_a_per_column_setting_naming_an_unlisted_column_is_refused_by_one_check(raw, message):
    from lakescore.steps.encoders import refuse_unlisted

    with pytest.raises(StepError) as err:
        learn_step({**raw, "name": "e", "columns": ["origin"]}, pd.DataFrame({"origin": ["JFK", "EWR"]}), None)
    assert str(err.value) == message
    params = parse_params({**raw, "name": "e", "columns": ["origin"]})
    setting = "categories name" if raw["step"] == "OrdinalEncoder" else "reference names"
    with pytest.raises(StepError) as direct:
        refuse_unlisted(params, setting, getattr(params, setting.split()[0]))
    assert str(direct.value) == message
    refuse_unlisted(params, setting, ["origin"])  # a listed column: nothing to refuse


def test_label_encoder_codes_by_hand_with_declared_unknown_and_missing_codes():
    train = pd.DataFrame({"carrier": ["UA", "AA", "B6", None, "UA"]})
    fitted = learn_step({"step": "LabelEncoder", "name": "l", "columns": ["carrier"], "missing_value": -9},
                        train, None)
    rows = pd.DataFrame({"carrier": ["B6", "UA", "AA", "ZZ", None]})
    out = fitted.apply(rows)["carrier"]
    assert out.dtype == np.float64 and out.tolist() == [1.0, 2.0, 0.0, -1.0, -9.0]  # AA 0, B6 1, UA 2
    assert _kernel_out(fitted, rows).array("carrier").tolist() == [1.0, 2.0, 0.0, -1.0, -9.0]
    empty = fitted.apply(rows.iloc[:0])["carrier"]
    assert empty.dtype == np.float64


@pytest.mark.parametrize("label", [[1, 0, 1, 0, 0, 1], ["yes", "no", "yes", "no", "no", "yes"]])
def test_woe_encoder_by_hand(label):
    train = pd.DataFrame({"c": ["a", "a", "a", "b", "b", None]})
    fitted = learn_step({"step": "WOEEncoder", "name": "w", "columns": ["c"]}, train, pd.Series(label))
    # 3 positive (1 / "yes"), 3 negative rows; regularization 1: woe = ln(((pos+1)/5) / ((neg+1)/5))
    # a: 2 pos 1 neg -> ln(3/2); b: 0 pos 2 neg -> ln(1/3); missing: 1 pos 0 neg -> ln 2; unseen: 0.0
    want = [np.log(1.5), np.log(1 / 3), np.log(2.0), 0.0]
    rows = pd.DataFrame({"c": ["a", "b", None, "z"]})
    assert floats_close(fitted.apply(rows)["c"].to_numpy(), np.array(want)).all()
    assert floats_close(_kernel_out(fitted, rows).array("c"), np.array(want)).all()


def test_woe_encoder_refuses_an_infinite_weight_and_a_label_of_three_classes():
    train = pd.DataFrame({"c": ["a", "a", "b", "b"]})
    with pytest.raises(StepError, match=r"column 'c' has a category seen in one class only, so with "
                                        r"regularization: 0.0 its weight of evidence is infinite; set regularization"):
        learn_step({"step": "WOEEncoder", "name": "w", "columns": ["c"], "regularization": 0},
                   train, pd.Series([1, 1, 0, 0]))
    with pytest.raises(StepError, match=r"WOEEncoder needs a label of 2 classes; got 3 .* Use TargetEncoder"):
        learn_step({"step": "WOEEncoder", "name": "w", "columns": ["c"]}, train, pd.Series([0, 1, 2, 1]))
    with pytest.raises(StepError, match="needs the label at training"):
        learn_step({"step": "WOEEncoder", "name": "w", "columns": ["c"]}, train, None)


@pytest.mark.parametrize("kind", ["DummyEncoder", "LabelEncoder", "WOEEncoder"])
def test_an_unknown_category_that_fails_the_batch_is_refused_with_a_fix(kind):
    with pytest.raises(StepError, match=r"handle_unknown: Value error, must be 'value': 'error' would fail every row "
                                        r"of a batch .* set the declared unknown code instead"):
        parse_params({"step": kind, "name": "e", "columns": ["carrier"], "handle_unknown": "error"})


def test_category_codes_are_the_codes_pd_categorical_gives():
    from lakescore.steps.encoders import category_codes

    categories = ["a", "b", "nan", "None", "1", "1.0", ""]
    values = np.array(["a", None, "nan", "zz", "1", "1.0", "", "b", "None"], dtype=object)
    assert category_codes(values, categories).tolist() == [0, -1, 2, -1, 4, 5, 6, 1, 3]  # by hand
    assert category_codes(values, categories).tolist() == pd.Categorical(values, categories=categories).codes.tolist()
    assert category_codes(np.array(["a"], dtype=object), []).tolist() == [-1]
    with pytest.raises(ValueError, match="unique"):
        category_codes(values, ["a", "a"])
