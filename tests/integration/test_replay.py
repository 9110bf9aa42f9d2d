"""A micro-batch replayed with the same batch id (what Spark does after a crash) writes nothing
twice and finishes what the first attempt left undone."""

from __future__ import annotations

from datetime import UTC, datetime

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming import sink as sink_module
from streaming.core.batch import RawRequest, split_landing_file
from streaming.job import Job
from streaming.outcomes import Status
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def seed(ws: Workspace) -> list[RawRequest]:
    ws.dataset("petstore", "petstore.Dog:\n  properties:\n    name: {type: string}\n")
    ws.data(
        "in/petstore/Dog/a.json", {"id": "dog1", "name": "Scooby"}, {"id": "dog2", "name": "Rex"}
    )
    body = (request("tx-1", upsert("./data/in")) + "\n").encode()
    return split_landing_file("file:/landing/a.jsonl", T0, body, T0)


def versions(job: Job) -> dict[str, int]:
    paths = job.layout.object_table("petstore", "petstore.Dog")
    return {
        p: deltalake.DeltaTable(p).version()
        for p in (paths.current, paths.history, paths.tombstones, job.layout.ledger)
    }


def test_replaying_a_completed_batch_changes_nothing_and_repeats_the_outcome(
    spark: SparkSession, ws: Workspace
) -> None:
    raws = seed(ws)
    job = Job.create(spark, ws.config())
    first = job.sink.process(raws, batch_id=0)
    after = versions(job)
    again = job.sink.process(raws, batch_id=0)
    assert versions(job) == after
    assert [o.status for o in first] == [o.status for o in again] == [Status.COMMITTED]
    assert again[0].actions == first[0].actions and again[0].committed_at == first[0].committed_at


def test_crash_before_history_is_rolled_forward_with_the_same_commit_time(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    raws = seed(ws)
    job = Job.create(spark, ws.config())

    def crash(*_: object) -> None:
        raise RuntimeError("driver died before the history append")

    monkeypatch.setattr(sink_module, "append_history", crash)
    with pytest.raises(RuntimeError):
        job.sink.process(raws, batch_id=0)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    assert deltalake.DeltaTable(paths.history).to_pyarrow_table().num_rows == 0
    current_version = deltalake.DeltaTable(paths.current).version()

    monkeypatch.undo()
    job.sink.clock = lambda: datetime(2030, 1, 1, tzinfo=UTC)  # a replay must not use a new time
    (outcome,) = job.sink.process(raws, batch_id=0)
    assert outcome.status is Status.COMMITTED and outcome.actions[0].inserted == 2
    assert deltalake.DeltaTable(paths.current).version() == current_version
    current = deltalake.DeltaTable(paths.current).to_pyarrow_table().to_pylist()
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    assert sorted((h["id"], h["version"], h["updated"]) for h in history) == sorted(
        (c["id"], c["version"], c["updated"]) for c in current
    )
    assert outcome.committed_at is not None and outcome.committed_at.year != 2030
