"""`lakescore serve`: the plan, the cost ceiling, errors before anything starts, and the endpoint
on the databricks placement (bound to the driver's address, token required)."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from dbx_serve_child import CLUSTER, ORG, WORKSPACE
from fixtures.once import SKIPPED
from serving_helpers import assert_same_answers, chain_of, expected_rows, launch, ready_replicas, records

from lakescore.cli import build_parser, main
from lakescore.runtime import LocalRuntime
from lakescore.serving.run import ceiling_text, monthly_ceiling


def test_the_ceiling_is_24_x_31_x_max_replicas_x_h() -> None:
    assert monthly_ceiling(0.5, 3) == 1116.0
    assert ceiling_text(0.25, 2) == (
        "monthly ceiling: 24 h x 31 days x 2 replicas (replicas.max) x 0.25 per hour = 372.00. This is an upper "
        "bound of compute, not a spending limit: nothing stops the endpoint when it is reached.")


def test_dry_run_prints_the_ceiling_and_the_pinned_version(module_home, capsys) -> None:
    home, config = module_home
    code = main(["serve", "--config-dir", str(config), "--home", str(home), "--cost-per-hour", "1.5", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    first, rest = out.split("\n", 1)
    assert first.startswith("monthly ceiling: 24 h x 31 days x 1 replicas (replicas.max) x 1.5 per hour = 1,116.00.")
    assert "upper bound of compute, not a spending limit" in first
    summary = json.loads(rest)
    assert summary["model"] == "models:/main.flights.late_arrival/1" and summary["monthly_ceiling"] == 1116.0
    assert not (home / "serving" / "token").exists()  # a dry run starts nothing


def test_no_registered_model_is_an_error_before_anything_starts(project_dir, runtime, capsys) -> None:
    code = main(["serve", "--config-dir", str(project_dir), "--home", str(runtime.home), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "config/serving.yml: model_selection 'champion': model_not_found" in err


def test_bundle_parameters_parse() -> None:
    args = build_parser().parse_args(["serve", "--config-dir", "c", "--target", "prod", "--runtime", "databricks",
                                      "--cost-per-hour", "2"])
    assert (args.command, args.target, args.runtime, args.cost_per_hour) == ("serve", "prod", "databricks", 2.0)


def _non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine that is not loopback (stands in for the driver's)."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                return str(address.address)
    return None


def test_on_the_databricks_placement_the_endpoint_binds_the_driver_and_requires_the_token(trained, tmp_path) -> None:
    driver = _non_loopback_ipv4()
    if driver is None:
        pytest.skip("this machine has no non-loopback IPv4 address to stand in for the driver's")
    home = tmp_path / "Volumes" / "main" / "flights" / "lakescore"  # the volume
    shutil.copytree(trained.home, home, ignore=SKIPPED)
    shutil.copytree(trained.config_dir, tmp_path / "config")
    child = [sys.executable, str(Path(__file__).with_name("dbx_serve_child.py")), driver, str(tmp_path / "config"),
             str(home)]
    ep = launch(home, tmp_path / "config", command=child, endpoint_name="on_databricks")
    try:
        port = int(ep.address.rsplit(":", 1)[1])
        assert ep.address == f"http://{driver}:{port}"
        with socket.socket() as probe:  # bound to the driver's address only, not loopback
            assert probe.connect_ex(("127.0.0.1", port)) != 0
        rows = records(trained.requests.head(3), trained.input_columns)
        bare = httpx.post(f"{ep.address}/invocations", json={"dataframe_records": rows}, timeout=30)
        assert bare.status_code == 401 and bare.json()["error_code"] == "unauthorized"
        assert httpx.get(f"{ep.address}/status", timeout=30).status_code == 401
        ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        answered = ep.score(rows)
        assert answered.status_code == 200
        want = expected_rows(chain_of(LocalRuntime(trained.home), 1), trained.requests.head(3))
        assert_same_answers(answered.json()["predictions"], want)
        url = f"https://{WORKSPACE}/driver-proxy-api/o/{ORG}/{CLUSTER}/{port}/"
        assert f'"url": "{url}"' in ep.log.read_text()  # what clients outside the driver call
    finally:
        ep.stop()


def test_two_serves_of_one_endpoint_at_once_one_serves_and_the_other_is_refused(module_home, trained) -> None:
    """Seen: both started, the second overwrote the endpoint file, and stopping it removed the file and
    the first one's replica rows while the first kept answering, undiscoverable."""
    from serving_helpers import attach, start_serve, write_serving

    from lakescore.serving.state.store import ServingState

    home, config = module_home
    name = write_serving(config, endpoint_name="twice", scale_interval_s=1)
    logs = [config.parent / f"serve-twice-{i}.log" for i in range(2)]
    procs = [start_serve(home, config, log) for log in logs]  # in the same second
    try:
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "neither serve stopped"
            time.sleep(0.1)
        [refused] = [i for i, p in enumerate(procs) if p.poll() is not None]
        winner = procs[1 - refused]
        ep = attach(winner, home, name, logs[1 - refused])
    except BaseException:
        for p in procs:
            p.kill()
        raise
    try:
        said = logs[refused].read_text()
        assert procs[refused].returncode == 2, said[-2000:]
        assert (f"lakescore serve: endpoint_running: endpoint 'twice' is already served from {home} by process "
                f"{winner.pid} at {ep.address} (version 1)") in said
        status = ep.wait_for(lambda s: bool(ready_replicas(s)), what="a ready replica")
        state = ServingState(home)
        held = [c["replica_id"] for c in state.resident_replicas() if c["endpoint"] == "twice"]
        assert held == [c["replica_id"] for c in status["replicas"]]  # the winner's rows, counted
        rows = records(trained.requests.head(2), trained.input_columns)
        assert ep.score(rows).status_code == 200
        assert json.loads((home / "serving" / "endpoints" / "twice.json").read_text())["pid"] == winner.pid
    finally:
        ep.stop()
    assert not (home / "serving" / "endpoints" / "twice.json").exists()  # its owner stopped: removed
    assert [c for c in state.resident_replicas() if c["endpoint"] == "twice"] == []
    state.close()
