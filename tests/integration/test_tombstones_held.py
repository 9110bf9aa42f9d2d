"""Tombstones held on the driver between batches (``storage.tombstones``): a key deleted in one
batch and written again in a later one continues from its tombstone's version without reading
the tombstones table (empty at first, then followed through the sink's own appends); a tombstone
another writer added in between is seen, by one read of the table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.batch import RawRequest, split_landing_file
from streaming.core.outcomes import Status
from streaming.runtime.job import Job
from streaming.storage import tombstones
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def batch(ws: Workspace, tid: str, operation: str, *rows: dict[str, Any]) -> list[RawRequest]:
    ws.data(f"{tid}/petstore/Dog/part.json", *rows)
    action = upsert(f"./data/{tid}") | {"operation": operation}
    return split_landing_file(
        f"file:/landing/{tid}.jsonl", T0, (request(tid, action) + "\n").encode(), T0
    )


def dogs(job: Job) -> dict[str, int]:
    path = job.layout.object_table("petstore", "petstore.Dog").current
    return {
        r["id"]: r["version"] for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    }


def test_a_deleted_key_written_again_continues_from_its_tombstone(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.dataset("petstore", "petstore.Dog:\n  properties:\n    name: {type: string}\n")
    job = Job.create(spark, ws.config())
    reads: list[str] = []
    real = tombstones._read

    def spy(spark: SparkSession, path: str, version: int, watermark: bool) -> Any:
        reads.append(path)
        return real(spark, path, version, watermark)

    monkeypatch.setattr(tombstones, "_read", spy)
    steps = [
        batch(ws, "t0", "UPSERT", {"id": "dog1", "name": "Rex"}, {"id": "dog2", "name": "Fido"}),
        batch(ws, "t1", "DELETE", {"id": "dog1"}),
        batch(ws, "t2", "UPSERT", {"id": "dog1", "name": "Rex again"}),
    ]
    for number, raws in enumerate(steps):
        (outcome,) = job.sink.process(raws, number)
        assert outcome.status is Status.COMMITTED
    # Never read: empty at first (its checksum says so, no job), then kept up to date with the
    # sink's own appends.
    assert reads == []
    assert dogs(job) == {"dog1": 3, "dog2": 1}  # inserted 1, deleted at 2, inserted again at 3

    # Another writer adds a later tombstone of dog2: the next batch sees it (its version moved).
    paths = job.layout.object_table("petstore", "petstore.Dog")
    spark.createDataFrame(
        [("dog2", 7, T0)], "id string, version long, deleted timestamp"
    ).write.format("delta").mode("append").save(paths.tombstones)
    (outcome,) = job.sink.process(batch(ws, "t3", "DELETE", {"id": "dog2"}), 3)
    (outcome,) = job.sink.process(batch(ws, "t4", "UPSERT", {"id": "dog2", "name": "F"}), 4)
    assert outcome.status is Status.COMMITTED
    assert reads == [paths.tombstones]
    # dog2 deleted at 2 (its live version + 1); its latest tombstone is the other writer's 7, so
    # it comes back at 8 (a copy that missed the other writer's row would give 3).
    assert dogs(job) == {"dog1": 3, "dog2": 8}
