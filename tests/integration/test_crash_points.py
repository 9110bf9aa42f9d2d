"""Kill the driver (SIGKILL) at each named crash point of a batch, check what it left behind,
restart, and check that every transaction is applied exactly once and has exactly one outcome
(docs/architecture.md, "Crashes"; streaming/core/faults.py); and at ``mid_upkeep``, after a
batch, in the middle of its upkeep (streaming/runtime/upkeep.py).

The crash runs as users run the job — ``cdc run --once`` in a process of its own, killed by
``FAULT_CRASH_AT`` — over one batch of three requests: one writing two tables, one deleting, one
malformed. The restart runs in this process, on the shared session: the same config, the same
checkpoint and warehouse on disk, a new job (nothing of the killed process survives but what it
wrote), so it is the restart a new process would make; a cold restart adds only a JVM start,
which every crash run here makes anyway (and tests/integration/test_s3_warehouse.py restarts cold
after a kill)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from functools import partial
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.config import load_config
from streaming.core.faults import CRASH_ENV, POINTS
from streaming.core.scd2 import intervals
from streaming.runtime.job import Job
from tests.support import Workspace, request
from tests.support.cdc import cdc_env, run_cdc
from tests.support.datasets import DOG, DOG_CAT, DOG_CAT_TABLES
from tests.support.side_by_side import side_by_side, taken
from tests.support.upkeep import committed_once, live_rows, table, transactions

pytestmark = pytest.mark.spark

CONFIG = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
datasets: {petstore: petstore.yaml}
landing: {transactions: ./landing/transactions}
allowed_locations: [./data]
spark: {shuffle_partitions: 2}
"""
DATASET = DOG_CAT.replace(
    "petstore.Dog:\n  properties: {name: {type: string}}\n",
    "petstore.Dog:\n  properties: {name: {type: string}}\n  scd2: true\n",
)
"""Dog keeps an SCD2 table: MERGEd once the current tables are written, before the ledger."""
assert DATASET != DOG_CAT
TABLES = {**DOG_CAT_TABLES, "Dog scd2": ("petstore", "_scd2", "petstore", "Dog")}
CURRENT = ("Dog", "Dog tombstones", "Cat", "Cat tombstones")
"""What applying the batch's segment writes (each object table's current and tombstones)."""
RECORDED = ("Dog scd2", "Dog history", "Cat history", "ledger", "quarantine")
"""What the batch writes once every current table is: the SCD2 MERGE, then the appends side by
side of ``runtime.batch.record.record_batch``."""

DONE: dict[str, list[tuple[Any, ...]]] = {
    "Dog": [("dog1", 1, "Rex")],
    "Dog tombstones": [("dog2", 2)],
    "Dog history": [("dog1", 1, "i", "tx-1"), ("dog2", 1, "i", "tx-1"), ("dog2", 2, "d", "tx-2")],
    "Cat": [("cat1", 1, "Tom")],
    "Cat tombstones": [],
    "Cat history": [("cat1", 1, "i", "tx-1")],
    # dog2, inserted and deleted in one batch (one commit time), has no interval
    "Dog scd2": [("dog1", 1, "Rex", None, False)],
    "ledger": [("tx-1", 0, "COMMITTED"), ("tx-2", 0, "COMMITTED")],
    "outcomes": [("tx-1", "COMMITTED", 0), ("tx-2", "COMMITTED", 0), ("tx-3", "REJECTED", 0)],
    "quarantine": [("tx-3", "INVALID_JSON", 0)],
}
"""Every table once batch 0 is done: lists of rows, so a row written twice is seen twice."""
NOTHING: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}


def rows(ws: Workspace, name: str) -> list[tuple[Any, ...]]:
    """The table's rows (delta-rs, no Spark) as the tuples ``DONE`` lists, sorted."""
    found = deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *TABLES[name])))
    items: list[dict[str, Any]] = found.to_pyarrow_table().to_pylist()
    out: list[tuple[Any, ...]]
    if name in ("Dog", "Cat"):
        out = [(r["id"], r["version"], r["name"]) for r in items]
    elif name.endswith("tombstones"):
        out = [(r["id"], r["version"]) for r in items]
    elif name.endswith("scd2"):
        out = [(r["id"], r["__version"], r["name"], r["__end_at"], r["__deleted"]) for r in items]
    elif name.endswith("history"):
        out = [(r["id"], r["version"], r["__op"], r["__transaction_id"]) for r in items]
    elif name == "ledger":
        out = [
            (r["transaction_id"], r["batch_id"], json.loads(r["outcome"])["status"]) for r in items
        ]
    elif name == "outcomes":
        out = [(r["transaction_id"], r["status"], r["batch_id"]) for r in items]
    else:
        out = [(r["transaction_id"], r["error_code"], r["batch_id"]) for r in items]
    return sorted(out)


def state(ws: Workspace) -> dict[str, list[tuple[Any, ...]]]:
    return {name: rows(ws, name) for name in TABLES}


def versions(ws: Workspace) -> dict[str, int]:
    return {
        name: deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *parts))).version()
        for name, parts in TABLES.items()
    }


def batch_files(ws: Workspace, kind: str) -> list[str]:
    """The streaming checkpoint's ``offsets`` or ``commits`` files (the batch ids)."""
    folder = ws.root / "checkpoints" / "cdc" / kind
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def check_left_behind(point: str, ws: Workspace) -> None:
    """What the batch wrote before the driver died at ``point`` (faults.py): exactly, where the
    order of the writes is fixed; where tables are written side by side, what is certain."""
    left = state(ws)
    done = {name: left[name] == DONE[name] for name in TABLES}
    if point == "before_first_commit":  # planned; nothing written
        assert left == NOTHING
    elif point == "between_commits":
        # One table of the wave is applied (its current and tombstones); the other, applied side
        # by side in a thread of its own, may have made some of its commits or none: each table
        # holds nothing or all of the batch (a commit is all or nothing). Nothing after the wave.
        assert (done["Dog"] and done["Dog tombstones"]) or done["Cat"], left
        assert {name: left[name] for name in CURRENT if not done[name]} == {
            name: [] for name in CURRENT if not done[name]
        }
        assert {name: left[name] for name in TABLES if name not in CURRENT} == {
            name: [] for name in TABLES if name not in CURRENT
        }
    elif point == "after_tables":  # every current table; nothing recorded
        assert left == {**NOTHING, **{name: DONE[name] for name in CURRENT}}
    elif point == "after_ledger":  # all but the outcomes
        assert left == {**DONE, "outcomes": []}
    else:
        assert point == "mid_outcomes", point  # all (the outcomes topic: none configured)
        assert left == DONE
    # A table holding rows has them from one commit (version 1), one without has none: the
    # created table (version 0).
    assert versions(ws) == {name: int(bool(left[name])) for name in TABLES}
    assert batch_files(ws, "offsets") == ["0"]  # batch 0 planned, never marked done
    assert batch_files(ws, "commits") == []


CRASHED = [p for p in POINTS if p != "mid_upkeep"]
"""The points of a batch: each killed in the batch above. ``mid_upkeep`` has its own run."""
UPKEEP_TRANSACTIONS = 4


Killed = tuple[Workspace, subprocess.CompletedProcess[str]]
"""A killed run's workspace and its process's exit and output."""


def _killed_at(ws: Workspace, point: str) -> Killed:
    """``cdc run --once`` on the workspace's ``cdc.yaml``, in a process of its own, killed at
    ``point``."""
    env = cdc_env({CRASH_ENV: point}, drop=[CRASH_ENV])
    return ws, run_cdc("run", "--once", "--config", "cdc.yaml", cwd=ws.root, env=env)


def _crash(ws: Workspace, point: str) -> Killed:
    """The workspace's batch run by ``cdc run --once`` in a process of its own, killed at
    ``point``."""
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
    return _killed_at(ws, point)


def _crash_mid_upkeep(ws: Workspace) -> Killed:
    """Four transactions, a batch each, tables compacted at two small files: ``cdc run --once``
    in a process of its own, killed in the middle of batch 0's upkeep."""
    ws.dataset("petstore", DOG)
    transactions(ws, UPKEEP_TRANSACTIONS)
    config: dict[str, Any] = {
        "warehouse": "./warehouse",
        "checkpoints": "./checkpoints",
        "datasets": {"petstore": "petstore.yaml"},
        "landing": {"transactions": "./landing/transactions", "max_files_per_trigger": 1},
        "allowed_locations": ["./data"],
        "spark": {"shuffle_partitions": 2},
        "upkeep": {"compact_files": 2},
    }
    (ws.root / "cdc.yaml").write_text(json.dumps(config))  # YAML reads JSON
    return _killed_at(ws, "mid_upkeep")


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Killed | BaseException]:
    """Every point's killed run, three processes at a time (``tests.support.side_by_side``);
    each test then checks its point's workspace and restarts it. ``mid_upkeep``'s run is of its
    own, in the same pool. On 2 cores this saves nothing measurable — each cold run is CPU to its
    crash point (~35 s): 151 s one after another, 155 s so, one clean-clone run each — and takes
    less where there are cores to spare. A run's failure is raised by its own test."""
    scenarios: dict[str, Callable[[], Killed]] = {
        point: partial(_crash, Workspace(tmp_path_factory.mktemp(point)), point)
        for point in CRASHED
    }
    scenarios["mid_upkeep"] = partial(
        _crash_mid_upkeep, Workspace(tmp_path_factory.mktemp("mid_upkeep"))
    )
    return side_by_side(scenarios, workers=3)


@pytest.mark.parametrize("point", CRASHED)
def test_killed_at_a_crash_point_then_restarted_applies_everything_once(
    spark: SparkSession,
    crashed: dict[str, Killed | BaseException],
    point: str,
) -> None:
    ws, run = taken(crashed, point)
    assert run.returncode == -9, run.stderr[-2000:]
    assert f"{CRASH_ENV}={point}: killing the driver" in run.stderr, run.stderr[-2000:]
    check_left_behind(point, ws)

    # The restart: a new job on the same config, checkpoint and warehouse.
    Job.create(spark, load_config(ws.root / "cdc.yaml")).run(once=True)

    assert state(ws) == DONE  # every row once: nothing lost, nothing written twice
    history = deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *TABLES["Dog history"])))
    scd2 = deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *TABLES["Dog scd2"])))
    want = intervals(history.to_pyarrow_table().to_pylist(), ["name"], ["name"])
    assert scd2.to_pyarrow_table().to_pylist() == want  # the reference over history
    assert batch_files(ws, "commits") == ["0"]  # the restart replayed batch 0 and finished it
    # Each table written by one commit (a replay skips a commit its batch made before the kill),
    # or none (Cat's tombstones: nothing deleted).
    assert versions(ws) == {**dict.fromkeys(TABLES, 1), "Cat tombstones": 0}


def test_killed_in_the_middle_of_upkeep_then_restarted_applies_everything_once(
    spark: SparkSession, crashed: dict[str, Killed | BaseException]
) -> None:
    ws, run = taken(crashed, "mid_upkeep")
    assert run.returncode == -9, run.stderr[-2000:]
    assert f"{CRASH_ENV}=mid_upkeep: killing the driver" in run.stderr, run.stderr[-2000:]
    # Batch 0 appended two small files to several tables (one per shuffle partition): its
    # upkeep compacted one of them (which one first is a tie), then the driver died with the
    # batch's offsets not yet marked done.
    compacted = re.search(r"upkeep: (?:compact|order) of (\S+) \(", run.stderr)
    assert compacted is not None, run.stderr[-2000:]
    assert batch_files(ws, "commits") == []
    last = deltalake.DeltaTable(str(ws.root / "warehouse" / compacted[1])).history(limit=1)
    assert "OPTIMIZE" in [c["operation"] for c in last]

    Job.create(spark, load_config(ws.root / "cdc.yaml")).run(once=True)

    committed_once(ws, UPKEEP_TRANSACTIONS)
    # tx-02 deleted dog-00; dog-keep renamed by each upsert, last by tx-03
    assert live_rows(ws) == {"dog-01": "Rex 1", "dog-03": "Rex 3", "dog-keep": "K3"}
    history = table(ws, "history").to_pyarrow_table(columns=["id", "version"]).to_pylist()
    assert len(history) == len({(r["id"], r["version"]) for r in history})
