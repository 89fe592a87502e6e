"""Helpers of the serving tests: expected answers computed straight from the saved chain, JSON
rows, and a real ``lakescore serve`` process on 127.0.0.1 with an authorised client."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import psutil
import yaml

from lakescore.chain import FittedChain
from lakescore.runtime import LocalRuntime

REPO = Path(__file__).resolve().parents[2]
MODEL = "main.flights.late_arrival"
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Trained:
    """Two certified versions of MODEL: v1 (champion) and v2 (other rows, stronger regularisation)."""

    home: Path
    config_dir: Path
    requests: pd.DataFrame  # flights of months 10-12 to send, cancelled and outlier rows included
    input_columns: tuple[str, ...]


def chain_of(runtime: LocalRuntime, version: int) -> FittedChain | JoiningChain:
    """The saved chain of a version, read straight from its artifacts (no pyfunc, no server); a chain
    with feature lookups comes as a :class:`JoiningChain` over the runtime's current feature tables."""
    mlflow = runtime.mlflow()
    local = mlflow.artifacts.download_artifacts(f"models:/{MODEL}/{version}/artifacts/chain")
    chain = FittedChain.load(local)
    if not chain.lookups:
        return chain
    names = dict.fromkeys(spec.table_name for spec in chain.lookups)
    return JoiningChain(chain, {name: runtime.read_table(name) for name in names})


@dataclass(frozen=True)
class JoiningChain:
    """A lookup chain as an endpoint serves it: ``input_columns`` are what a request carries (the keys
    and times instead of the looked-up columns) and ``predict`` joins the feature tables
    (``lakescore.lookup.join_all``, pandas) before ``FittedChain.predict``."""

    chain: FittedChain
    tables: dict[str, pd.DataFrame]

    @property
    def input_columns(self) -> tuple[str, ...]:
        from lakescore.lookup import lookup_inputs

        return tuple(lookup_inputs(self.chain.lookups, self.chain.input_columns))

    @property
    def task(self) -> str:
        return self.chain.task

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        from lakescore.lookup import join_all

        return self.chain.predict(join_all(frame, self.tables, self.chain.lookups))


def records(frame: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """Rows as JSON values: NaN -> None, numpy scalars -> Python."""
    out = []
    for row in frame[list(columns)].to_dict("records"):
        clean = {}
        for key, value in row.items():
            if isinstance(value, np.generic):
                value = value.item()
            if isinstance(value, float) and math.isnan(value):
                value = None
            if isinstance(value, pd.Timestamp):  # a point-in-time lookup's time: ISO 8601 text
                value = value.isoformat()
            clean[key] = value
        out.append(clean)
    return out


def expected_rows(chain: FittedChain | JoiningChain, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``FittedChain.predict`` of the rows, as plain values (None for missing)."""
    scored = chain.predict(frame[list(chain.input_columns)].reset_index(drop=True))
    return [{k: (None if pd.isna(v) else (v.item() if isinstance(v, np.generic) else v)) for k, v in row.items()}
            for row in scored.to_dict("records")]


def assert_same_answers(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Row by row: equal labels, status and reason; probabilities within 1e-12 + 1e-9*|b|."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g["prediction"] == w["prediction"], i
        assert g["scoring_status"] == w["scoring_status"], i
        assert g["exclusion_reason"] == w["exclusion_reason"], i
        if w["probability"] is None:
            assert g["probability"] is None, i
        else:
            assert abs(g["probability"] - w["probability"]) <= 1e-12 + 1e-9 * abs(w["probability"]), i


@dataclass
class RunningEndpoint:
    """A ``lakescore serve`` process and an authorised client for it."""

    proc: subprocess.Popen[bytes]
    home: Path
    address: str
    token: str
    log: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.address, headers={"Authorization": f"Bearer {self.token}"},
                                   timeout=120)

    def score(self, rows: list[dict[str, Any]], **extra: Any) -> httpx.Response:
        headers = extra.pop("headers", {})
        return self.client.post("/invocations", json={"dataframe_records": rows, **extra}, headers=headers)

    def status(self) -> dict[str, Any]:
        return self.client.get("/status").json()

    def wait_for(self, check: Callable[[dict[str, Any]], bool], *, what: str,
                 timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Poll ``/status`` every 0.25 s until ``check`` holds (bounded by ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        status = self.status()
        while not check(status):
            assert self.proc.poll() is None, f"endpoint exited: {self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}; status: {json.dumps(status)[:1500]}"
            time.sleep(0.25)
            status = self.status()
        return status

    def events(self, event: str) -> list[Any]:
        from lakescore.serving.state.store import ServingState

        state = ServingState(self.home)
        try:
            return state.events(event)
        finally:
            state.close()

    def stop(self) -> None:
        self.client.close()
        replicas = [p for p in psutil.Process(self.proc.pid).children(recursive=True)] if self.proc.poll() is None else []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for child in replicas:  # replicas exit with their parent; make sure none is left
            try:
                child.wait(timeout=10)
            except psutil.TimeoutExpired:
                child.kill()
            except psutil.NoSuchProcess:
                pass


def ready_replicas(status: dict[str, Any], role: str = "serve") -> list[dict[str, Any]]:
    return [c for c in status["replicas"] if c["role"] == role and c["state"] == "ready"]


# Linux: the child asks for SIGTERM when the test process dies, even without teardown (no orphans), then
# becomes the command. Done after exec, not in a ``preexec_fn``: that forces a fork of the whole test process,
# whose fork handlers (gRPC's, once anything imported it) can hang the child before it execs (seen in CI).
DIE_WITH_PARENT = ("import ctypes, os, signal, sys; "
                   "ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM); "  # 1 = PR_SET_PDEATHSIG
                   "os.execvp(sys.argv[1], sys.argv[1:])")


def launch(home: Path, config_dir: Path, *, command: list[str] | None = None, **serving: Any) -> RunningEndpoint:
    """Write serving.yml (the template with ``serving`` overrides, port 0) and start ``lakescore serve``
    (or ``command``, a process that runs it)."""
    name = write_serving(config_dir, **serving)
    log = config_dir.parent / f"serve-{name}.log"
    return attach(start_serve(home, config_dir, log, command=command), home, name, log)


def write_serving(config_dir: Path, **serving: Any) -> str:
    """Write serving.yml: the template with ``serving`` overrides and port 0; returns the endpoint's name."""
    settings = yaml.safe_load((REPO / "config" / "serving.yml").read_text())
    settings.update({"port": 0, **serving})
    (config_dir / "serving.yml").write_text(yaml.safe_dump(settings))
    return str(settings["endpoint_name"])


def start_serve(home: Path, config_dir: Path, log: Path, *, command: list[str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``lakescore serve`` (or ``command``) with its output appended to ``log``; returns at once."""
    with open(log, "ab") as out:
        command = command or [sys.executable, "-m", "lakescore.cli", "serve", "--config-dir", str(config_dir),
                              "--home", str(home)]
        return subprocess.Popen([sys.executable, "-c", DIE_WITH_PARENT, *command],
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def attach(proc: subprocess.Popen[bytes], home: Path, name: str, log: Path) -> RunningEndpoint:
    """The endpoint ``proc`` serves, once its endpoint file names it."""
    where = home / "serving" / "endpoints" / f"{name}.json"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (where.exists() and json.loads(where.read_text())["pid"] == proc.pid):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"lakescore serve did not start: {log.read_text()[-3000:]}")
        time.sleep(0.2)
    info = json.loads(where.read_text())
    token = Path(info["token_file"]).read_text().strip()
    return RunningEndpoint(proc, home, info["address"], token, log)
