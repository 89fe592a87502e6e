"""Each part's answers on its sample are computed once per admission and shared between its checks
(and between parts that run the same function on the same sample), and what each check proves stays."""

import pandas as pd
import pytest

from lakescore.admission.fresh import FreshProcess
from lakescore.admission.parts import Part, chain_parts
from lakescore.admission.probe import probe_parts


def _counting(calls):
    def run(frame):
        calls.append(frame)
        return pd.DataFrame({"y": frame["x"].astype("float64") * 2.0}, index=frame.index)

    return run


@pytest.fixture
def sample():
    return pd.DataFrame({"x": [float(i) for i in range(20)]}, index=range(100, 120))


def test_a_parts_whole_sample_answer_is_computed_once_and_repeat_still_runs_it_again(sample):
    calls = []
    results = probe_parts([Part("builtin", "step:0", "Step 's' (S)", _counting(calls), sample)])
    assert {r.status for r in results["step:0"]} == {"passed"}
    # the shared answer, and repeat's second run: not one per check (8 checks ran)
    assert sum(frame is sample for frame in calls) == 2


def test_the_compiled_plan_and_the_chain_share_their_one_row_answers(sample):
    calls = []
    run = _counting(calls)
    parts = [Part("compiled", "compiled", "Compiled plan", run, sample, runs_chain=True, reference=_counting([])),
             Part("chain", "chain", "Chain", run, sample, runs_chain=True)]
    results = probe_parts(parts)
    assert [r.check for r in results["compiled"]][:2] == ["agree:whole", "agree:rows"]
    assert {r.status for rs in results.values() for r in rs} == {"passed"}
    # agree:rows scores each row alone; chunks:1 of the chain takes those answers (20 rows, not 40)
    assert sum(len(frame) == 1 for frame in calls) == len(sample)


def test_a_fresh_process_left_early_is_stopped_and_its_folder_removed(small_chain, flights_sample):
    parts = chain_parts(small_chain, flights_sample.iloc[1000:1256])
    with pytest.raises(RuntimeError, match="probe stopped"):
        with FreshProcess(small_chain, parts) as fresh:
            folder = fresh.folder
            raise RuntimeError("probe stopped")
    assert not folder.exists()
    assert fresh._child.poll() is not None  # not left running
