"""Table upkeep inside the job (``upkeep:``; streaming/runtime/upkeep.py), on real Spark and
Delta, every table read back with delta-rs (the independent reader): small files compacted as
they gather while every transaction is applied once; a current table whose rows came in random
id order clustered at its first write; retention properties and VACUUM. A driver killed in the
middle of upkeep, restarted, applying everything once: tests/integration/test_crash_points.py,
whose killed processes run side by side."""

from __future__ import annotations

import os
import random

import deltalake
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from streaming.core.upkeep import overlap_depth
from streaming.runtime.job import Job
from streaming.runtime.upkeep import retention_properties
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG
from tests.support.upkeep import TABLES, committed_once, live_rows, table, transactions

pytestmark = pytest.mark.spark


def test_the_job_compacts_each_table_as_its_small_files_gather_and_applies_everything_once(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG)
    expected = transactions(ws, 9, per_file=3)
    cfg = ws.config(
        landing={"transactions": "./landing/transactions", "max_files_per_trigger": 1},
        upkeep={"compact_files": 3, "budget": "10 minutes"},
    )
    job = Job.create(spark, cfg)
    job.run(once=True)  # three batches of three transactions, each with one delete

    committed_once(ws, 9)
    assert live_rows(ws) == {k: v for k, v in expected.items() if v is not None}
    for name in ("current", "history", "tombstones", "ledger", "outcomes"):
        found = table(ws, name)
        operations = [c["operation"] for c in found.history()]
        # three batches appended (one or two files each, one per shuffle partition) to each
        # table, the tombstones too (one delete a batch): without upkeep as many files, three
        # or more. The current table's MERGEs rewrite the file of the dog every batch renames.
        assert name == "current" or "OPTIMIZE" in operations, (name, operations)
        # compacted whenever a third small file came: never three left after a batch
        assert len(found.file_uris()) <= 2, (name, found.file_uris())
        # upkeep's commits carry no batch identity: a replay never takes one for its own
        for commit in found.history():
            if commit["operation"] == "OPTIMIZE":
                assert "userMetadata" not in commit or not commit["userMetadata"], commit
        # retention set when the job created the table
        configuration = found.metadata().configuration
        for key, value in retention_properties(7 * 86400).items():
            assert configuration.get(key) == value, (name, configuration)
        found.to_pyarrow_table()  # every table stays readable by delta-rs
    # the history keeps every version of every row, once
    history = table(ws, "history").to_pyarrow_table(columns=["id", "version"]).to_pylist()
    assert len(history) == len({(r["id"], r["version"]) for r in history}) == 6 * 2 + 3
    # the ledger's ids held on the driver followed its compactions (no read of the table again)
    ledger_version = table(ws, "ledger").version()
    assert job.sink.committed_ids.version == ledger_version


def test_compacting_a_tombstones_table_drops_the_rows_no_reader_needs(
    spark: SparkSession, ws: Workspace
) -> None:
    """Rex is deleted, re-inserted and deleted again (two tombstones: the first superseded);
    Fido is deleted and re-inserted (live again: his tombstone superseded by his row). Three
    batches, each appending one tombstone: rex's first, fido's, rex's second."""
    ws.dataset("petstore", DOG)
    steps = [
        ("upsert", {"id": "rex", "name": "Rex"}),
        ("upsert", {"id": "fido", "name": "Fido"}),
        ("delete", {"id": "rex"}),
        ("delete", {"id": "fido"}),
        ("upsert", {"id": "rex", "name": "Rex II"}),
        ("upsert", {"id": "fido", "name": "Fido II"}),
        ("delete", {"id": "rex"}),
    ]
    lines = []
    for n, (kind, row) in enumerate(steps):
        tid = f"tx-{n:02d}"
        ws.data(f"{tid}/petstore/Dog/part.json", row)
        action = (
            upsert(f"./data/{tid}")
            if kind == "upsert"
            else {"operation": "DELETE", "locationUri": f"./data/{tid}", "format": "JSON"}
        )
        lines.append(request(tid, action))
    for batch in ((0, 1, 2), (3,), (4, 5, 6)):  # a landing file each: a batch each
        ws.requests(*(lines[n] for n in batch))
    landing = {"transactions": "./landing/transactions", "max_files_per_trigger": 1}
    upkeep = {"compact_files": 3, "budget": "10 minutes"}
    Job.create(spark, ws.config(landing=landing, upkeep=upkeep)).run(once=True)

    tombstones = table(ws, "tombstones")
    # the third tombstone appended made the table due: pruned to rex's latest, written whole
    assert "WRITE" in [c["operation"] for c in tombstones.history(limit=1)]
    rows = tombstones.to_pyarrow_table(columns=["id", "version"]).to_pylist()
    assert rows == [{"id": "rex", "version": 4}]
    assert live_rows(ws) == {"fido": "Fido II"}

    # What the job reads of the table is unchanged: rex comes back at version 5, after the
    # tombstone kept; fido (version 3 when live again) is updated from his live row.
    ws.data(
        "back/petstore/Dog/part.json", {"id": "rex", "name": "Rex III"}, {"id": "fido", "name": "F"}
    )
    ws.requests(request("back", upsert("./data/back")))
    Job.create(spark, ws.config(landing=landing, upkeep=upkeep)).run(once=True)
    current = table(ws, "current").to_pyarrow_table(columns=["id", "version", "name"]).to_pylist()
    assert sorted((r["id"], r["version"], r["name"]) for r in current) == [
        ("fido", 4, "F"),
        ("rex", 5, "Rex III"),
    ]


def _id_ranges(path: str) -> list[tuple[str, str]]:
    found = deltalake.DeltaTable(path)
    files = found.get_add_actions(flatten=True).column("path").to_pylist()
    ranges = []
    for file in files:
        ids = pq.read_table(os.path.join(path, file), columns=["id"]).column("id").to_pylist()
        ranges.append((min(ids), max(ids)))
    return ranges


def test_a_current_table_written_in_random_id_order_is_clustered_at_its_first_write(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG)
    ids = [f"{n:04d}" for n in range(600)]
    random.Random(7).shuffle(ids)
    for n in range(3):  # three batches of 200 ids from all over the range: three wide files
        rows = [{"id": i, "name": f"dog {i}"} for i in ids[n * 200 : (n + 1) * 200]]
        ws.data(f"load-{n}/petstore/Dog/part.json", *rows)
        ws.requests(request(f"load-{n}", upsert(f"./data/load-{n}")))
    landing = {"transactions": "./landing/transactions", "max_files_per_trigger": 1}
    Job.create(spark, ws.config(landing=landing, upkeep={"enabled": False})).run(once=True)
    path = str(ws.root.joinpath("warehouse", *TABLES["current"]))
    assert overlap_depth(_id_ranges(path)) == 3  # every file may hold any id

    ws.data("more/petstore/Dog/part.json", {"id": "0001", "name": "renamed"})
    ws.requests(request("more", upsert("./data/more")))
    # The next job's first write looks at the table's order (a depth of 3 ≥ 2) and clusters it.
    Job.create(spark, ws.config(landing=landing, upkeep={"order_depth": 2})).run(once=True)

    found = deltalake.DeltaTable(path)
    assert "OPTIMIZE" in [c["operation"] for c in found.history(limit=2)]
    assert overlap_depth(_id_ranges(path)) == 1  # each file its own id range
    rows = found.to_pyarrow_table(columns=["id", "name"]).to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert {r["id"]: r["name"] for r in rows}["0001"] == "renamed"


def test_upkeep_sets_retention_on_older_tables_and_vacuums_on_its_period(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG)
    transactions(ws, 1)
    Job.create(spark, ws.config(upkeep={"enabled": False})).run(once=True)  # an older job's tables
    assert "delta.logRetentionDuration" not in table(ws, "ledger").metadata().configuration

    transactions_after = 2
    for n in range(1, 1 + transactions_after):
        ws.data(f"tx-{n:02d}/petstore/Dog/part.json", {"id": f"dog-{n:02d}", "name": "Fido"})
        ws.requests(request(f"tx-{n:02d}", upsert(f"./data/tx-{n:02d}")))
    cfg = ws.config(
        landing={"transactions": "./landing/transactions", "max_files_per_trigger": 1},
        upkeep={"retention": "2 hours", "vacuum_every": "1 second", "budget": "10 minutes"},
    )
    Job.create(spark, cfg).run(once=True)

    wanted = retention_properties(2 * 3600)
    for name in ("current", "history", "tombstones", "ledger", "outcomes", "quarantine"):
        found = table(ws, name)
        assert {k: found.metadata().configuration.get(k) for k in wanted} == wanted, name
    # The second batch came more than a second after the job first saw the tables: VACUUMed
    # (nothing is old enough to remove: the files are minutes old, the retention 2 hours).
    operations = [c["operation"] for c in table(ws, "ledger").history()]
    assert "VACUUM END" in operations, operations
    committed_once(ws, 1 + transactions_after)
