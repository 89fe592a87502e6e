"""Pure publication decisions over table metadata: write, or replay no-op, or refuse.

Delta app transactions (``app_id`` -> ``version``) record which source version a job published.
delta-rs records them but does not enforce them (a replayed append with the same version
duplicates rows), so the guard is here: a request whose source version is at or below the
target's recorded transaction version for the same ``app_id`` writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Literal

from lakescore.errors import PublishError

RECEIPT_KEY = "lakescore.receipt"


def app_id_for(job_name: str, target: str, prediction_table: str) -> str:
    """The app transaction id of a job: ``lakescore/<job>/<target>/<table>`` (stable across runs)."""
    return f"lakescore/{job_name}/{target}/{prediction_table}"


@dataclass(frozen=True)
class PublishRequest:
    """What one publication wants to commit."""

    app_id: str
    run_id: str
    prediction_table: str
    source_table: str
    source_version: int
    model_name: str
    model_version: int
    artifact_sha256: str
    columns: tuple[str, ...]

    @property
    def digest(self) -> str:
        """SHA-256 of the request without its run id (the same request, run twice, has one digest)."""
        body = {k: v for k, v in asdict(self).items() if k != "run_id"}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class TargetState:
    """What the prediction table looks like at the version the writer read."""

    exists: bool
    version: int | None = None
    txn_version: int | None = None
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Decision:
    action: Literal["write", "noop"]
    message: str
    read_version: int | None


def decide(request: PublishRequest, target: TargetState) -> Decision:
    """Decide what to do with ``request`` against ``target``.

    Returns
    -------
    Decision
        ``noop`` when the app transaction already covers ``request.source_version`` (a replay),
        else ``write`` against ``target.version``.

    Raises
    ------
    PublishError
        When the table's columns differ from the predictions' (no silent schema evolution).
    """
    if not target.exists:
        return Decision("write", f"create {request.prediction_table}", None)
    if target.txn_version is not None and target.txn_version >= request.source_version:
        return Decision("noop", (f"replay: no-op ({request.source_table} v{request.source_version} was already "
                                 f"published by {request.app_id}, up to v{target.txn_version})"), target.version)
    if target.columns is not None and tuple(target.columns) != tuple(request.columns):
        extra = sorted(set(request.columns) - set(target.columns))
        gone = sorted(set(target.columns) - set(request.columns))
        raise PublishError(
            f"{request.prediction_table} has columns {list(target.columns)}, the predictions have "
            f"{list(request.columns)} (new: {extra}, missing: {gone}). lakescore does not evolve the "
            "schema silently: write to a new prediction_table, or run `lakescore publish --migrate`.",
            table=request.prediction_table,
        )
    return Decision("write", f"append to {request.prediction_table} v{target.version}", target.version)
