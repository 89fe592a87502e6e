"""The local runtime's table naming and its errors."""

import pandas as pd
import pytest

from lakescore.errors import TableExistsError, TableNotFoundError
from lakescore.runtime import LocalRuntime


def test_three_part_names_map_to_warehouse_folders(tmp_path):
    runtime = LocalRuntime(tmp_path / "home")
    assert runtime.table_path("main.flights.flights") == (tmp_path / "home" / "warehouse" / "main" / "flights" / "flights")


@pytest.mark.parametrize("name", ["flights", "main.flights", "main.flights.flights.x", "main.flights.fl-ights", "main..x"])
def test_names_that_are_not_three_parts_are_refused(tmp_path, name):
    with pytest.raises(TableNotFoundError, match="is not a three-part name catalog.schema.table"):
        LocalRuntime(tmp_path).table_path(name)


def test_a_missing_table_names_the_folder_and_the_fix(tmp_path):
    runtime = LocalRuntime(tmp_path)
    with pytest.raises(TableNotFoundError) as err:
        runtime.table_version("main.flights.nope")
    assert "main.flights.nope does not exist" in str(err.value)
    assert str(tmp_path / "warehouse" / "main" / "flights" / "nope") in str(err.value)


def test_written_tables_read_back_at_a_pinned_version(tmp_path):
    runtime = LocalRuntime(tmp_path)
    runtime.write_table("main.s.t", pd.DataFrame({"k": [1, 2]}))
    runtime.write_table("main.s.t", pd.DataFrame({"k": [3]}), mode="append")
    assert runtime.table_version("main.s.t") == 1
    assert runtime.read_table("main.s.t", version=0)["k"].tolist() == [1, 2]
    assert sorted(runtime.read_table("main.s.t")["k"].tolist()) == [1, 2, 3]
    with pytest.raises(TableExistsError, match="table main.s.t already exists at .*never overwrites") as err:
        runtime.write_table("main.s.t", pd.DataFrame({"k": [4]}))  # mode="error" never overwrites
    assert err.value.code == "table_exists"
    assert sorted(runtime.read_table("main.s.t")["k"].tolist()) == [1, 2, 3]


FIRST_USE = """
import sys
import mlflow  # imported before the start signal, so the four first uses really overlap
from lakescore.runtime import LocalRuntime
wait_for_start()
print(LocalRuntime(sys.argv[1]).mlflow().get_experiment_by_name("lakescore").experiment_id)
"""


def test_four_processes_initialise_a_fresh_home_at_once(tmp_path, at_once):
    home = tmp_path / "home"
    done = at_once(FIRST_USE, [str(home)] * 4)
    assert [code for code, _, _ in done] == [0, 0, 0, 0], [err[-2000:] for _, _, err in done]
    assert len({out.strip() for _, out, _ in done}) == 1  # one lakescore experiment, made once
    mlflow = LocalRuntime(home).mlflow()  # a later command on the same home
    assert [e.name for e in mlflow.search_experiments()].count("lakescore") == 1
    client = mlflow.MlflowClient()
    client.create_registered_model("main.s.m")
    assert [m.name for m in client.search_registered_models()] == ["main.s.m"]
