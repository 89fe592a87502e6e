"""Every lint rule catches its broken fixture and names the step, file, line, call and fix."""

import broken_user_code as user  # beside this file (see conftest.py)
import pytest

from lakescore.admission.lint import lint_function, lint_source


def messages(fn):
    return [f.message for f in lint_function(fn, part=f"Custom step '{fn.__name__}'")]


def test_a_batch_mean_is_refused_with_the_issue_message():
    assert messages(user.fill_values) == [
        "Custom step 'fill_values' reads a batch statistic (broken_user_code.py line 10: df['x'].mean()). "
        "Compute it in learn() and read it from state in apply()."]


@pytest.mark.parametrize("fn,line,call,what", [
    (user.reads_index, 15, "df.index", "reads the index"),
    (user.writes_global, 20, "global SEEN", "writes shared process state"),
    (user.sorts, 26, "df.sort_values('x')", "depends on the batch"),
    (user.counts_rows, 30, "len(df)", "depends on the batch"),
    (user.sets_environment, 35, "os.environ['LAKESCORE_SEEN'] = '1'", "writes shared process state"),
    (user.remembers, 40, "cache.append(len(df.columns))", "writes shared process state"),
    (user.tags_itself, 45, "tags_itself.calls = 1", "writes shared process state"),
    (user.uses_globals, 50, "globals()", "writes shared process state"),
    (user.calls_a_helper, 55, "frame['x'].median()", "reads a batch statistic"),
])
def test_each_rule_names_file_line_and_call(fn, line, call, what):
    found = messages(fn)
    assert len(found) == 1, found
    assert found[0].startswith(f"Custom step '{fn.__name__}' {what} (broken_user_code.py line {line}: {call}).")


def test_row_wise_forms_and_empty_guards_pass():
    assert messages(user.row_wise) == []


@pytest.mark.parametrize("body", ["df['x'].rank()", "df['x'].shift(1)", "df['x'].diff()", "df['x'].cumsum()",
                                  "df.groupby('g')['x'].transform('mean')", "df['x'].value_counts()",
                                  "df.duplicated()", "df['x'].quantile(0.5)", "df['x'].nunique()", "df['x'].std()",
                                  "df['x'].any()", "df.shape[0]"])
def test_every_whole_batch_call_is_refused(body):
    source = f"def apply(df, state):\n    df['y'] = {body}\n    return df\n"
    found = lint_source(source, "apply", part="Custom step 's'", file="preprocessing.py", first_line=7)
    assert len(found) == 1 and "(preprocessing.py line 8:" in found[0].message, found


def test_aliases_of_the_input_frame_are_followed():
    source = "def apply(df, state):\n    col = df['x']\n    df['y'] = col.max()\n    return df\n"
    assert [f.call for f in lint_source(source, "apply", part="p")] == ["col.max()"]


def test_learn_is_not_linted_only_apply_is():
    source = "def learn(df, y, params):\n    return {'m': df['x'].mean()}\n\ndef apply(df, state):\n    return df\n"
    assert lint_source(source, "apply", part="p", module_source=source) == []


def test_aligning_a_new_series_with_the_frame_index_passes_but_reading_it_fails():
    ok = "def rule(df, params):\n    return pd.Series(df['p'] > 0.5, index=df.index)\n"
    assert lint_source(ok, "rule", part="p") == []
    bad = "def rule(df, params):\n    return pd.Series(df.index > 5, index=df.index)\n"
    assert [f.call for f in lint_source(bad, "rule", part="p")] == ["df.index"]


def test_a_forward_fill_is_refused_as_reading_other_rows():
    assert messages(user.forward_fill) == [
        "Custom step 'forward_fill' reads other rows (broken_user_code.py line 82: frame['dep_delay'].ffill()). "
        "Read only the row's own values: fill a gap with a value learned in learn() and read from state "
        "(e.g. fillna(state['dep_delay'])), never from the rows around it."]


@pytest.mark.parametrize("body", ["df['x'].ffill()", "df['x'].bfill()", "df.pad()", "df['x'].backfill()",
                                  "df['x'].fillna(method='ffill')", "df['x'].replace(-1, method='pad')",
                                  "df['x'].interpolate()", "df['x'].cumsum()", "df['x'].cumprod()",
                                  "df['x'].cummax()", "df['x'].cummin()", "df['x'].rolling(3).mean()",
                                  "df['x'].expanding().sum()", "df['x'].ewm(span=3).mean()", "df['x'].shift(1)",
                                  "df['x'].diff()", "df['x'].pct_change()", "df['x'].rank()"])
def test_every_call_that_reads_neighbouring_rows_is_one_finding(body):
    source = f"def apply(df, state):\n    df['y'] = {body}\n    return df\n"
    found = lint_source(source, "apply", part="Custom step 's'", file="preprocessing.py", first_line=7)
    call = body.removesuffix(".mean()").removesuffix(".sum()")  # a window's aggregate is not a second finding
    assert [f.message.split(". ")[0] for f in found] == [
        f"Custom step 's' reads other rows (preprocessing.py line 8: {call})"]


def test_a_fill_with_a_value_or_method_none_passes():
    source = "def apply(df, state):\n    df['y'] = df['x'].fillna(state['x'], method=None)\n    return df\n"
    assert lint_source(source, "apply", part="p") == []


@pytest.mark.parametrize("fn,line,call", [
    (user.codes_by_first_seen, 90, "CACHE.setdefault('carrier', {})"),
    (user.logs_widths, 96, "SEEN_ROWS.append(df.shape[1])"),
    (user.fills_a_module_dict, 101, "CACHE['width'] = df.shape[1]"),
])
def test_changing_a_module_level_dict_or_list_is_refused(fn, line, call):
    assert messages(fn) == [
        f"Custom step '{fn.__name__}' writes shared process state (broken_user_code.py line {line}: {call}). "
        "Keep state in learn()'s return value; apply() must not write anything outside the frame."]


def test_a_local_dict_and_numpy_append_are_not_shared_state():
    module = "import numpy as np\nCACHE = {}\n\ndef apply(df, state):\n    CACHE = {}\n    CACHE.update(a=1)\n" \
             "    df['y'] = np.append(df['x'].to_numpy(), [])\n    return df\n"
    assert lint_source(module, "apply", part="p", module_source=module) == []
