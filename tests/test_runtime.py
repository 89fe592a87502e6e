"""The local runtime's table naming and its errors."""

import pandas as pd
import pytest

from lakescore.errors import TableNotFoundError
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
    with pytest.raises(Exception):
        runtime.write_table("main.s.t", pd.DataFrame({"k": [4]}))  # mode="error" never overwrites


def test_a_nullable_long_and_boolean_column_read_back_exact(tmp_path):
    runtime = LocalRuntime(tmp_path)
    big = 2**53 + 1  # 9007199254740993: a double holds only ...992
    runtime.write_table("main.s.t", pd.DataFrame({"k": pd.array([big, None, -big], dtype="Int64"),
                                                  "ok": pd.array([True, None, False], dtype="boolean"),
                                                  "x": [0.5, None, 1.5]}))
    got = runtime.read_table("main.s.t")
    assert str(got["k"].dtype) == "Int64" and str(got["ok"].dtype) == "boolean" and str(got["x"].dtype) == "float64"
    assert got["k"].tolist() == [9007199254740993, pd.NA, -9007199254740993]
    assert got["ok"].tolist() == [True, pd.NA, False]
    assert runtime.read_table("main.s.t", columns=["k"])["k"].iloc[0] == 9007199254740993
