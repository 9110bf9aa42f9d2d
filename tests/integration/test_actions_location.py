"""PATCH, DELETE and INSERT_IGNORE from a location (seed 000), with history and tombstones."""

from __future__ import annotations

from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.outcomes import Outcome, Status
from streaming.storage.tables import read_table
from tests.support import Workspace, request
from tests.support.datasets import DOG_AGE

pytestmark = pytest.mark.spark


def action(operation: str, location: str) -> dict[str, Any]:
    return {"operation": operation, "locationUri": location, "format": "JSON"}


def rows(path: str, *columns: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table(columns=list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in table)


def outcome_of(spark: SparkSession, ws: Workspace, tid: str) -> Outcome:
    layout = ws.config()
    row = (
        read_table(spark, f"{layout.warehouse}/_system/outcomes")
        .where(f"transaction_id = '{tid}'")
        .orderBy("batch_id")
        .collect()[-1]
    )
    return Outcome.from_json(row["outcome"])


def seed_dogs(ws: Workspace) -> None:
    ws.dataset("petstore", DOG_AGE)
    ws.data(
        "setup/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby Doo"},
        {"id": "dog2", "name": "Lassie"},
        {"id": "dog3", "name": "Clifford"},
    )
    ws.data("update/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby"})
    ws.requests(
        request("tx-setup", action("UPSERT", "./data/setup")),
        request("tx-update", action("UPSERT", "./data/update")),
    )


def test_seed_delete_action_example(spark: SparkSession, ws: Workspace) -> None:
    """dog1 v2 Scooby, dog2 v1 Lassie, dog3 v1 Clifford; DELETE {"id": "dog3"} → dog1, dog2."""
    seed_dogs(ws)
    ws.data("ingest2/petstore/Dog/anyfile.json", {"id": "dog3"})
    ws.requests(request("tx-delete", action("DELETE", "./data/ingest2")))
    job = ws.run_once(spark)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    assert rows(paths.current, "id", "version", "name") == [
        ("dog1", 2, "Scooby"),
        ("dog2", 1, "Lassie"),
    ]
    tombstone = [
        r for r in rows(paths.history, "id", "version", "name", "__deleted", "__op") if r[3]
    ]
    assert tombstone == [("dog3", 2, "Clifford", True, "d")]  # the last data, version + 1
    assert rows(paths.tombstones, "id", "version") == [("dog3", 2)]
    deleted = outcome_of(spark, ws, "tx-delete")
    assert (deleted.status, deleted.actions[0].deleted) == (Status.COMMITTED, 1)


def test_reinsert_after_delete_continues_the_version(spark: SparkSession, ws: Workspace) -> None:
    seed_dogs(ws)
    ws.data("gone/petstore/Dog/part.json", {"id": "dog3"})
    ws.data("back/petstore/Dog/part.json", {"id": "dog3", "name": "Clifford II"})
    ws.requests(request("tx-delete", action("DELETE", "./data/gone")))
    ws.run_once(spark)
    ws.requests(request("tx-back", action("UPSERT", "./data/back")))
    job = ws.run_once(spark)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    assert ("dog3", 3, "Clifford II") in rows(paths.current, "id", "version", "name")
    history = [r for r in rows(paths.history, "id", "version", "__op") if r[0] == "dog3"]
    assert history == [("dog3", 1, "i"), ("dog3", 2, "d"), ("dog3", 3, "i")]
    # The live row carries the version on; the tombstones table is append-only: the old
    # tombstone stays, superseded by the live row.
    assert rows(paths.tombstones, "id", "version") == [("dog3", 2)]


def test_delete_of_an_absent_id_is_skipped(spark: SparkSession, ws: Workspace) -> None:
    seed_dogs(ws)
    ws.data("nobody/petstore/Dog/part.json", {"id": "dog9"})
    ws.requests(request("tx-del9", action("DELETE", "./data/nobody")))
    ws.run_once(spark)
    counts = outcome_of(spark, ws, "tx-del9").actions[0]
    assert (counts.deleted, counts.skipped) == (0, 1)


def test_patch_from_location_updates_only_present_columns_and_never_creates(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG_AGE)
    ws.data(
        "setup/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby Doo", "age": 5},
        {"id": "dog2", "name": "Médor", "age": 3},
        {"id": "dog3", "name": "Corniaud"},
    )
    ws.data(
        "ages/petstore/Dog/part.json",
        {"id": "dog1", "age": 6},
        {"id": "dog2", "age": 4},
        {"id": "dog9", "age": 1},
    )
    ws.requests(
        request("tx-setup", action("UPSERT", "./data/setup")),
        request("tx-patch", action("PATCH", "./data/ages")),
    )
    job = ws.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "version", "name", "age") == [
        ("dog1", 2, "Scooby Doo", 6),
        ("dog2", 2, "Médor", 4),
        ("dog3", 1, "Corniaud", None),
    ]
    counts = outcome_of(spark, ws, "tx-patch").actions[0]
    assert (counts.updated, counts.skipped, counts.inserted) == (2, 1, 0)


def test_insert_ignore_from_location_keeps_existing_rows(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG_AGE)
    ws.data("setup/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby Doo"})
    ws.data(
        "change/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby"},
        {"id": "dog2", "name": "Lassie"},
        {"id": "dog3", "name": "Clifford"},
    )
    ws.requests(
        request("tx-setup", action("UPSERT", "./data/setup")),
        request("tx-ignore", action("INSERT_IGNORE", "./data/change")),
    )
    job = ws.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "version", "name") == [
        ("dog1", 1, "Scooby Doo"),
        ("dog2", 1, "Lassie"),
        ("dog3", 1, "Clifford"),
    ]
    counts = outcome_of(spark, ws, "tx-ignore").actions[0]
    assert (counts.inserted, counts.skipped) == (2, 1)
