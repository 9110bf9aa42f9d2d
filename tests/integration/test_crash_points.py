"""Kill the driver (SIGKILL) at each named crash point of a batch, restart, and check that every
transaction is applied exactly once and has an outcome (docs/architecture.md, "Crashes";
streaming/core/faults.py).

The job runs as users run it — ``cdc run --once`` in a process of its own — over one batch of
three requests: one writing two tables, one deleting, one malformed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import deltalake
import pytest

from streaming.core.faults import CRASH_ENV, POINTS
from tests.support import Workspace, request

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
DATASET = """\
petstore.Dog:
  properties: {name: {type: string}}
petstore.Cat:
  properties: {name: {type: string}}
"""
CONFIG = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
datasets: {petstore: petstore.yaml}
landing: {transactions: ./landing/transactions}
allowed_locations: [./data]
spark: {shuffle_partitions: 2}
"""


def run(ws: Workspace, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli.main", "run", "--once", "--config", "cdc.yaml"],
        cwd=ws.root,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def table(ws: Workspace, *parts: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = (
        deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *parts)))
        .to_pyarrow_table()
        .to_pylist()
    )
    return rows


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_a_crash_point_then_restarted_applies_everything_once(
    ws: Workspace, point: str
) -> None:
    ws.dataset("petstore", DATASET)
    (ws.root / "cdc.yaml").write_text(CONFIG)
    ws.data(
        "one/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"}, {"id": "dog2", "name": "Fido"}
    )
    ws.data("one/petstore/Cat/part.json", {"id": "cat1", "name": "Tom"})
    ws.data("two/petstore/Dog/part.json", {"id": "dog2"})
    upsert = {"operation": "UPSERT", "locationUri": "./data/one", "format": "JSON"}
    delete = {"operation": "DELETE", "locationUri": "./data/two", "format": "JSON"}
    ws.requests(request("tx-1", upsert), request("tx-2", delete), '{"transactionId": "tx-3", ')

    crashed = run(ws, point)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    restarted = run(ws, None)
    assert restarted.returncode == 0, restarted.stderr[-2000:]

    dogs = table(ws, "petstore", "petstore", "Dog")
    assert [(r["id"], r["version"], r["name"]) for r in dogs] == [("dog1", 1, "Rex")]
    assert [(r["id"], r["version"]) for r in table(ws, "petstore", "petstore", "Cat")] == [
        ("cat1", 1)
    ]
    history = table(ws, "petstore", "_history", "petstore", "Dog")
    assert sorted((h["id"], h["version"], h["__op"]) for h in history) == [
        ("dog1", 1, "i"),
        ("dog2", 1, "i"),
        ("dog2", 2, "d"),
    ]
    assert [
        (r["id"], r["version"]) for r in table(ws, "petstore", "_tombstones", "petstore", "Dog")
    ] == [("dog2", 2)]
    ledger = table(ws, "_system", "transactions")
    assert sorted(r["transaction_id"] for r in ledger) == ["tx-1", "tx-2"]  # once each
    assert {json.loads(r["outcome"])["status"] for r in ledger} == {"COMMITTED"}
    outcomes = table(ws, "_system", "outcomes")
    status = {o["transaction_id"]: o["status"] for o in outcomes}
    assert status == {"tx-1": "COMMITTED", "tx-2": "COMMITTED", "tx-3": "REJECTED"}
    first_run = {o["batch_id"] for o in outcomes}
    assert first_run == {0}  # the restart replayed batch 0: same batch, same outcomes
